// Affine index expressions: normalization, arithmetic, bounds.
#include <doctest/doctest.h>

#include <limits>

#include "neuron/ir/affine.hpp"

using neuron::Affine;

TEST_CASE("affine expressions normalize so equal values compare equal") {
  Affine i = Affine::var("i0"), j = Affine::var("i1");
  CHECK(i * 128 + j + 3 == j + 3 + 128 * i);
  CHECK((i - i).is_constant());
  CHECK((i - i).constant == 0);
  CHECK((i * 2 + j).str() == "i0*2 + i1");
  CHECK((-i + 5).str() == "-i0 + 5");
  CHECK(Affine(7).str() == "7");
}

TEST_CASE("affine bounds and evaluation") {
  Affine e = Affine::var("i0") * 128 - Affine::var("pid0") + 4;
  auto [lo, hi] = e.bounds({{"i0", {0, 7}}, {"pid0", {0, 3}}});
  CHECK(lo == 1);
  CHECK(hi == 7 * 128 + 4);
  CHECK(e.eval({{"i0", 2}, {"pid0", 1}}) == 259);
  CHECK(e.substitute("i0", Affine::var("i5") + 1) == Affine::var("i5") * 128 - Affine::var("pid0") + 132);
}

TEST_CASE("affine printing of the most negative coefficient and constant is well defined") {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  CHECK(Affine::var("i0", lo).str() == "-i0*9223372036854775808");
  CHECK((Affine::var("i0") + Affine(lo)).str() == "i0 - 9223372036854775808");
  CHECK(Affine(lo).str() == "-9223372036854775808");
}
