// Tests for StopMatcher: stop strings split across pieces, several stop
// strings, a stop at the very start, and no text held back at the end.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/text/stop_matcher.h"

using namespace prefixd;

namespace {

struct Streamed {
  std::string emitted;
  bool stopped = false;
  int32_t stop_index = -1;
};

Streamed stream(StopMatcher& m, const std::vector<std::string>& pieces) {
  Streamed s;
  for (const auto& p : pieces) {
    StopMatcher::Output o = m.feed(p);
    s.emitted += o.text;
    if (o.stopped) {
      s.stopped = true;
      if (s.stop_index < 0) s.stop_index = o.stop_index;
    }
  }
  s.emitted += m.flush();
  return s;
}

}  // namespace

TEST_CASE("without stop strings every piece is emitted at once") {
  StopMatcher m({});
  CHECK(m.empty());
  auto o = m.feed("hello");
  CHECK(o.text == "hello");
  CHECK_FALSE(o.stopped);
  CHECK(m.flush().empty());
}

TEST_CASE("a stop string inside one piece cuts the text before it") {
  StopMatcher m({"END"});
  auto o = m.feed("abcENDdef");
  CHECK(o.stopped);
  CHECK(o.text == "abc");
  CHECK(o.stop_index == 0);
  CHECK(m.stopped());
  auto after = m.feed("more");
  CHECK(after.stopped);
  CHECK(after.text.empty());
  CHECK(m.flush().empty());
}

TEST_CASE("a stop string spanning pieces is held back and then stops") {
  StopMatcher m({"</answer>"});
  auto a = m.feed("The result is 4</an");
  CHECK(a.text == "The result is 4");
  CHECK_FALSE(a.stopped);
  CHECK(m.held_bytes() == 4);
  auto b = m.feed("swe");
  CHECK(b.text.empty());
  CHECK(m.held_bytes() == 7);
  auto c = m.feed("r> trailing");
  CHECK(c.stopped);
  CHECK(c.text.empty());
}

TEST_CASE("a stop string split into single characters") {
  StopMatcher m({"STOP"});
  Streamed s = stream(m, {"x", "S", "T", "O", "P", "y"});
  CHECK(s.stopped);
  CHECK(s.emitted == "x");
}

TEST_CASE("held text that turns out not to be a stop string is released") {
  StopMatcher m({"</answer>"});
  auto a = m.feed("a </an");
  CHECK(a.text == "a ");
  auto b = m.feed("d more");
  CHECK(b.text == "</and more");
  CHECK_FALSE(b.stopped);
  CHECK(m.held_bytes() == 0);
}

TEST_CASE("the end of the stream flushes held text") {
  StopMatcher m({"###"});
  auto a = m.feed("text ##");
  CHECK(a.text == "text ");
  CHECK(m.flush() == "##");
  CHECK(m.held_bytes() == 0);
}

TEST_CASE("no text is held when its end cannot start a stop string") {
  StopMatcher m({"\n\nUser:", "###"});
  auto a = m.feed("plain words");
  CHECK(a.text == "plain words");
  CHECK(m.held_bytes() == 0);
  auto b = m.feed(" end\n");
  CHECK(b.text == " end");
  CHECK(m.held_bytes() == 1);
}

TEST_CASE("a stop string at the very start emits nothing") {
  StopMatcher m({"<|end|>"});
  Streamed s = stream(m, {"<|", "end", "|>", "after"});
  CHECK(s.stopped);
  CHECK(s.emitted.empty());
}

TEST_CASE("with several stop strings the earliest match wins") {
  StopMatcher m({"world", "lo w"});
  Streamed s = stream(m, {"hel", "lo wor", "ld"});
  CHECK(s.stopped);
  CHECK(s.emitted == "hel");
  CHECK(s.stop_index == 1);
}

TEST_CASE("on a tie at the same position the longest stop string wins") {
  StopMatcher m({"ab", "abc"});
  auto o = m.feed("xxabcd");
  CHECK(o.stopped);
  CHECK(o.text == "xx");
  CHECK(o.stop_index == 1);
}

TEST_CASE("overlapping partial matches hold the longest candidate suffix") {
  // "xaaa" ends with "aaa", a prefix of "aaab": three bytes are held.
  StopMatcher m({"aaab"});
  auto a = m.feed("xaaa");
  CHECK(a.text == "x");
  CHECK(m.held_bytes() == 3);
  auto b = m.feed("a");  // "aaaa": the last three could still start "aaab"
  CHECK(b.text == "a");
  auto c = m.feed("b");
  CHECK(c.stopped);
  CHECK(c.text.empty());
}

TEST_CASE("stop index refers to the caller's list even with empty entries") {
  StopMatcher m({"", "zz"});
  auto o = m.feed("azzb");
  CHECK(o.stopped);
  CHECK(o.stop_index == 1);
  CHECK(o.text == "a");
}

TEST_CASE("multi-byte UTF-8 stop strings split inside a character") {
  const std::string stop = "\xe3\x80\x82";  // U+3002 IDEOGRAPHIC FULL STOP
  StopMatcher m({stop});
  Streamed s = stream(m, {"ok\xe3", "\x80", "\x82rest"});
  CHECK(s.stopped);
  CHECK(s.emitted == "ok");
}
