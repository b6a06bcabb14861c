# The custom_op test: builds examples/custom_op from a clean folder against the package the
# package_install fixture installed, then runs its script (results against a float64 PyTorch
# reference). Also checks that a malformed operator header fails the build with its file and
# line. Run by ctest:
#   cmake -DPREFIX=<install prefix> -DSOURCE=<examples/custom_op> -DWORK=<scratch dir>
#         -DCXX=<compiler> [-DLAUNCHER=<ccache>] -DPYTHON=<python3> -DPYTHONPATH=<build/python>
#         -DMALFORMED=<header> -P build_custom_op.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(common -G Ninja -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_BUILD_TYPE=Release)
if(LAUNCHER)
  list(APPEND common -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "custom_op: ${what} failed (exit ${rc})")
  endif()
endfunction()

run("configuring the example" ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build ${common})
run("building the example" ${CMAKE_COMMAND} --build ${WORK}/build)
run("running the example" ${CMAKE_COMMAND} -E env PYTHONPATH=${PYTHONPATH}
    ${PYTHON} ${SOURCE}/run.py ${WORK}/build/libmy_ops.so)

# A malformed header: the same CMake function, a build error naming the header's line.
file(MAKE_DIRECTORY ${WORK}/bad)
get_filename_component(bad_name ${MALFORMED} NAME)
file(COPY ${MALFORMED} DESTINATION ${WORK}/bad)
file(WRITE ${WORK}/bad/CMakeLists.txt "cmake_minimum_required(VERSION 3.22)
project(bad LANGUAGES CXX)
find_package(neuron REQUIRED)
neuron_add_op_library(bad_ops NAMESPACE bad HEADERS ${bad_name})
")
run("configuring the malformed example" ${CMAKE_COMMAND} -S ${WORK}/bad -B ${WORK}/bad/build
    ${common})
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/bad/build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "custom_op: the malformed header built")
endif()
if(NOT out MATCHES "${bad_name}:[0-9]+:[0-9]+: error: tensor 'y' of operator 'late_tensor' comes after a parameter")
  message(FATAL_ERROR "custom_op: the malformed header's build error does not name its line:\n${out}")
endif()
message("custom_op: the malformed header fails at its line, as it should")
