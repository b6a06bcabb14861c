# neuron.load_ops on files that are not operator libraries (the libraries themselves are built
# and loaded by the `custom_op` ctest, tests/package/build_custom_op.cmake, since building one
# needs the installed package).
import pytest

import neuron
from neuron import _C


def test_a_shared_library_without_the_entry_points_is_refused_by_name():
    with pytest.raises(ValueError, match="is not a neuron operator library"):
        neuron.load_ops(_C.__file__, register_torch=False)


def test_a_file_that_is_not_a_shared_library_is_an_os_error(tmp_path):
    p = tmp_path / "libnot_ops.so"
    p.write_text("not an ELF file")
    with pytest.raises(OSError):
        neuron.load_ops(str(p), register_torch=False)
