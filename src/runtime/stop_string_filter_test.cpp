#include "runtime/stop_string_filter.h"

#include <gtest/gtest.h>

namespace lucid {
namespace {

TEST(StopStringFilterTest, PassesEverythingWithoutStops) {
  StopStringFilter f({});
  EXPECT_EQ(f.Push("ab"), "ab");
  EXPECT_EQ(f.Push("c"), "c");
  EXPECT_EQ(f.Flush(), "");
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, HoldsBackAPossibleStartAndReleasesItWhenItIsNot) {
  StopStringFilter f({"END"});
  EXPECT_EQ(f.Push("abcE"), "abc");
  EXPECT_EQ(f.Push("N"), "");
  EXPECT_EQ(f.Push("x"), "ENx");
  EXPECT_EQ(f.Push("E"), "");
  EXPECT_EQ(f.Flush(), "E");
}

TEST(StopStringFilterTest, StopsAcrossPiecesAndDropsTheStopAndWhatFollows) {
  StopStringFilter f({"###", "\n\n"});
  EXPECT_EQ(f.Push("one #"), "one ");
  EXPECT_EQ(f.Push("#"), "");
  EXPECT_EQ(f.Push("# two"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "###");
  EXPECT_EQ(f.Push("more"), "");
  EXPECT_EQ(f.Flush(), "");
}

TEST(StopStringFilterTest, TheEarliestStopWins) {
  StopStringFilter f({"cd", "b"});
  EXPECT_EQ(f.Push("abcd"), "a");
  EXPECT_EQ(f.matched(), "b");
}

TEST(StopStringFilterTest, OverlappingPrefixes) {
  StopStringFilter f({"aab"});
  EXPECT_EQ(f.Push("a"), "");
  EXPECT_EQ(f.Push("a"), "");
  EXPECT_EQ(f.Push("a"), "a");  // "aaa": the tail "aa" may still start "aab"
  EXPECT_EQ(f.Push("b"), "");
  EXPECT_TRUE(f.stopped());
}

}  // namespace
}  // namespace lucid
