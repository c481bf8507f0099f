#include "engine/hf_tokenizer/hf_bpe_model.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/hf_tokenizer/regex.h"
#include "engine/hf_tokenizer/unicode_util.h"
#include "engine/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::hf_tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

// testdata/tiny_tokenizer.json: ids 0..255 are the byte characters in GPT-2's
// order ("!" is 0, as in real vocabularies; B(byte) is a byte's id), then the
// merges' results and the added tokens.
constexpr int kHe = 256, kHello = 259, kWorld = 264 /* "Ġworld" */;
constexpr int kAa = 265, kAaaa = 266, kSpaces = 267 /* "ĠĠ" */, k12 = 268;
constexpr int kShi = 270 /* 世 */, kEAcute = 271 /* é */, kCa = 272;
constexpr int kEnd = 273, kBos = 274, kSep = 275, kCafe = 276;

// The id of a byte's character.
int B(int byte) {
  int printable = 0;  // Bytes before it in GPT-2's printable ranges.
  auto in_table = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
  };
  for (int b = 0; b < 256; ++b) printable += in_table(b);
  int before = 0;
  if (in_table(byte)) {
    for (int b = 0; b < byte; ++b) before += in_table(b);
    return before;
  }
  for (int b = 0; b < byte; ++b) before += !in_table(b);
  return printable + before;
}

std::string TestDataPath() {
  return "engine/hf_tokenizer/testdata/tiny_tokenizer.json";
}

std::string ReadTestData() {
  std::ifstream in(TestDataPath(), std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<HfBpeModel> Load(const std::string& config = "") {
  auto model = HfBpeModel::FromJson(ReadTestData(), config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// The test tokenizer.json with `edit` applied.
absl::StatusOr<std::unique_ptr<HfBpeModel>> LoadEdited(
    const std::function<void(json*)>& edit) {
  json j = json::parse(ReadTestData());
  edit(&j);
  return HfBpeModel::FromJson(j.dump(), "");
}

TEST(RegexTest, OnigurumaSemantics) {
  MatchScratch scratch;
  std::vector<std::pair<size_t, size_t>> m;
  // ^ and $ are line anchors; lines end at \n only.
  auto anchors = Regex::Compile("^a|b$");
  ASSERT_TRUE(anchors.ok());
  (*anchors)->FindAll("a\nab\rb\nb", &scratch, &m);
  EXPECT_THAT(m, ElementsAre(std::pair<size_t, size_t>(0, 1),
                             std::pair<size_t, size_t>(2, 3),
                             std::pair<size_t, size_t>(5, 6),
                             std::pair<size_t, size_t>(7, 8)));
  // Empty matches are reported (they cut the text) except where the last
  // match ended: after "été", \p{L}* matches empty at its end (not
  // reported; the search moves past U+3000, which \s never gets to match),
  // then empty before "!" and at the end.
  auto words = Regex::Compile("\\p{L}*|\\s");
  ASSERT_TRUE(words.ok());
  (*words)->FindAll("\xC3\xA9t\xC3\xA9\xE3\x80\x80!", &scratch, &m);
  EXPECT_THAT(m, ElementsAre(std::pair<size_t, size_t>(0, 5),
                             std::pair<size_t, size_t>(8, 8),
                             std::pair<size_t, size_t>(9, 9)));
  // \s is Unicode White_Space as in Oniguruma: U+0085 yes, U+180E no (PCRE2's
  // own \s takes it); \h is an ASCII hex digit; "\\s" stays a backslash
  // and an s.
  auto space = Regex::Compile("\\s|[^\\S]|\\h+|\\\\s");
  ASSERT_TRUE(space.ok());
  (*space)->FindAll("\xC2\x85\xE1\xA0\x8E\taF9g\\s", &scratch, &m);
  EXPECT_THAT(m, ElementsAre(std::pair<size_t, size_t>(0, 2),
                             std::pair<size_t, size_t>(5, 6),
                             std::pair<size_t, size_t>(6, 9),
                             std::pair<size_t, size_t>(10, 12)));
  // A literal (Split's String pattern).
  auto literal = Regex::Compile("a.", /*literal=*/true);
  ASSERT_TRUE(literal.ok());
  (*literal)->FindAll("ab a.", &scratch, &m);
  EXPECT_THAT(m, ElementsAre(std::pair<size_t, size_t>(3, 5)));
}

TEST(HfBpeModelTest, LoadsVocabularyAndAddedTokens) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->vocab_size(), 277);
  EXPECT_EQ(model->IdToPiece(kWorld), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(model->IdToPiece(kEnd), "<|end|>");
  EXPECT_EQ(model->PieceToId("hello"), kHello);
  EXPECT_EQ(model->bos_id(), -1);
  EXPECT_EQ(model->eos_id(), -1);
  EXPECT_EQ(model->unk_id(), -1);
  EXPECT_TRUE(model->IsControl(kEnd));
  EXPECT_FALSE(model->IsControl(kSep));
  EXPECT_FALSE(model->IsControl(kHello));
}

TEST(HfBpeModelTest, EncodesWithMergesByRank) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(model->EncodeText("hello world"), ElementsAre(kHello, kWorld));
  // "he" (rank 0) before "ll" (1) before "hell" (2); "hex" has no merge
  // past "he".
  EXPECT_THAT(model->EncodeText("hex"), ElementsAre(kHe, B('x')));
  // Equal ranks merge leftmost first: aaaaa -> aa aa a -> aaaa a.
  EXPECT_THAT(model->EncodeText("aaaaa"), ElementsAre(kAaaa, B('a')));
  EXPECT_THAT(model->EncodeText("aaa"), ElementsAre(kAa, B('a')));
  EXPECT_THAT(model->EncodeText("ca"), ElementsAre(kCa));
  // Multi-byte characters: 世 merges to one token, 界 stays bytes.
  EXPECT_THAT(model->EncodeText("\xE4\xB8\x96\xE7\x95\x8C"),
              ElementsAre(kShi, B(0xE7), B(0x95), B(0x8C)));
  EXPECT_THAT(model->EncodeText(""), ElementsAre());
}

TEST(HfBpeModelTest, MergesInTheOlderStringForm) {
  auto model = LoadEdited([](json* j) {
    json merges = json::array();
    for (const json& m : (*j)["model"]["merges"]) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
    (*j)["model"]["merges"] = merges;
  });
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->EncodeText("hello world ca"),
              ElementsAre(kHello, kWorld, B(' '), kCa));
  auto bad = LoadEdited([](json* j) { (*j)["model"]["merges"][0] = "h e x"; });
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("is not \"a b\""));
}

TEST(HfBpeModelTest, PreTokenizerRegexSplitsWords) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  // "\s+(?!\S)": of three spaces before a word, two stand alone ("ĠĠ") and
  // the third starts the word.
  EXPECT_THAT(model->EncodeText("hello   world"),
              ElementsAre(kHello, kSpaces, kWorld));
  // \p{N} is one digit per pre-token: "12" does not merge.
  EXPECT_THAT(model->EncodeText("12"), ElementsAre(B('1'), B('2')));
  // A case-insensitive contraction is its own pre-token.
  EXPECT_THAT(model->EncodeText("a'LL"),
              ElementsAre(B('a'), B('\''), B('L'), B('L')));
}

TEST(HfBpeModelTest, HeapAndQuadraticMergesAgree) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(7);
  const std::string alphabet = "ahelowrd 12";
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int> symbols(1 + rng() % 40);
    for (int& s : symbols) {
      char c = alphabet[rng() % alphabet.size()];
      s = B(static_cast<unsigned char>(c));
    }
    std::vector<int> quadratic = symbols, heap = symbols;
    model->MergeSymbols(&quadratic, /*heap=*/false);
    model->MergeSymbols(&heap, /*heap=*/true);
    ASSERT_EQ(quadratic, heap) << "trial " << trial;
  }
}

TEST(HfBpeModelTest, LongWordsUseTheHeapAndMatchShortOnes) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  // 100 a's: one pre-token, merged with the heap: 25 "aaaa".
  std::vector<int> ids = model->EncodeText(std::string(100, 'a'));
  EXPECT_EQ(ids, std::vector<int>(25, kAaaa));
}

TEST(HfBpeModelTest, SpecialTokensSplitOutAndDecode) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(model->EncodeText("hello<|end|>hello"),
              ElementsAre(kHello, kEnd, kHello));
  // Leftmost-longest: "<|end|" alone is no token.
  EXPECT_THAT(model->EncodeText("<|end|"),
              ElementsAre(B('<'), B('|'), B('e'), B('n'), B('d'), B('|')));
  std::vector<int> ids = {kHello, kEnd, kBos, kWorld};
  EXPECT_EQ(model->DecodeIds(ids, /*skip_special=*/false),
            "hello<|end|><|bos|> world");
  EXPECT_EQ(model->DecodeIds(ids, /*skip_special=*/true), "hello world");
  std::string text, error;
  ASSERT_TRUE(model->Decode(ids, &text, &error));
  EXPECT_EQ(text, "hello world");
}

TEST(HfBpeModelTest, LstripAndRstripSwallowWhitespace) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(model->EncodeText("a \t <sep>\n b"),
              ElementsAre(B('a'), kSep, B('b')));
  EXPECT_EQ(model->DecodeIds({B('a'), kSep, B('b')}, true), "a<sep>b");
}

TEST(HfBpeModelTest, NormalizesToNfcBeforeNormalizedAddedTokens) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  // "cafe" + U+0301 is "café" after NFC: the normalized added token.
  EXPECT_THAT(model->EncodeText("cafe\xCC\x81"), ElementsAre(kCafe));
  EXPECT_THAT(model->EncodeText("e\xCC\x81"), ElementsAre(kEAcute));
  EXPECT_THAT(model->EncodeText("\xC3\xA9"), ElementsAre(kEAcute));
}

TEST(HfBpeModelTest, IsBytePartialCharacters) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->IsByte(B(0xE4)));
  EXPECT_TRUE(model->IsByte(model->PieceToId("\xC3\xA4\xC2\xB8")));  // "ä¸"
  EXPECT_FALSE(model->IsByte(kShi));
  EXPECT_FALSE(model->IsByte(B('a')));
  EXPECT_FALSE(model->IsByte(kEnd));
}

TEST(HfBpeModelTest, PieceBytesAreTheTokensRawBytes) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->PieceBytes(kWorld), " world");
  EXPECT_EQ(model->PieceBytes(B(0xE4)), "\xE4");  // part of a character
  EXPECT_EQ(model->PieceBytes(model->PieceToId("\xC3\xA4\xC2\xB8")),
            "\xE4\xB8");
  EXPECT_EQ(model->PieceBytes(kEnd), "");  // special: decodes to nothing
  EXPECT_EQ(model->PieceBytes(kCafe), "caf\xC3\xA9");  // an added token
}

TEST(HfBpeModelTest, DecodeReplacesIllFormedUtf8LikeFromUtf8Lossy) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  // E4 B8 is one maximal subpart: one U+FFFD; a lone 0x96 is another.
  EXPECT_EQ(model->DecodeIds({B(0xE4), B(0xB8), B('a'), B(0x96)}, true),
            "\xEF\xBF\xBD"
            "a"
            "\xEF\xBF\xBD");
}

TEST(HfBpeModelTest, InvalidUtf8InputIsEncodedLossily) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->EncodeText("a\xFF"
                              "b"),
            model->EncodeText("a\xEF\xBF\xBD"
                              "b"));
}

TEST(HfBpeModelTest, RoundTripsRandomText) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  const std::vector<std::string> atoms = {"a",
                                          "h",
                                          "e",
                                          "l",
                                          "o",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\t",
                                          "1",
                                          "2",
                                          "'s",
                                          "!",
                                          "\xE4\xB8\x96",
                                          "\xE7\x95\x8C",
                                          "\xC3\xA9",
                                          "\xF0\x9F\x98\x80",
                                          "<|end|>",
                                          "\xD0\x96",
                                          "."};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int n = rng() % 30;
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    EXPECT_EQ(model->DecodeIds(model->EncodeText(text), false), text);
  }
}

TEST(HfBpeModelTest, RandomBytesRoundTripThroughLossyUtf8AndNfc) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(5);
  const std::string bytes =
      "ae l\n\x80\xBF\xC3\xA9\xCC\x81\xE4\xB8\x96\xF0\x9F";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = rng() % 24;
    for (int i = 0; i < n; ++i) text += bytes[rng() % bytes.size()];
    std::string expected = Utf8Lossy(text), nfc;
    if (NormalizeNfc(expected, &nfc)) expected = nfc;
    ASSERT_EQ(model->DecodeIds(model->EncodeText(text), false), expected)
        << "trial " << trial;
  }
}

TEST(HfBpeModelTest, IncrementalDetokenizerOnRandomIds) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  const int vocab = model->vocab_size();
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(model));
  std::mt19937 rng(9);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> ids(rng() % 30);
    for (int32_t& id : ids) id = rng() % vocab;
    IncrementalDetokenizer detok(tokenizer.get());
    std::string streamed;
    for (int32_t id : ids) {
      auto delta = detok.Next(id);
      ASSERT_TRUE(delta.ok());
      ASSERT_TRUE(IsValidUtf8(*delta));
      streamed += *delta;
    }
    auto tail = detok.Flush();
    ASSERT_TRUE(tail.ok());
    streamed += *tail;
    auto whole = tokenizer->Decode(ids);
    ASSERT_TRUE(whole.ok());
    ASSERT_EQ(streamed, *whole) << "trial " << trial;
  }
}

TEST(HfBpeModelTest, WorksUnderTokenizerWithIncrementalDetokenization) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(model));
  const std::string text =
      "hello \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80 world<|end|> "
      "caf\xC3\xA9 12\n";
  auto ids = tokenizer->Encode(text, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto decoded = tokenizer->Decode(*ids);
  ASSERT_TRUE(decoded.ok());
  std::string without_special = text;
  without_special.erase(without_special.find("<|end|>"), 7);
  EXPECT_EQ(*decoded, without_special);
  // Keeping special tokens (Hugging Face's decode default): the text as
  // written, and DecodeIds(ids, false) wherever they sit.
  auto kept = tokenizer->Decode(*ids, SpecialTokens::kKeep);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, text);
  const std::vector<int32_t> around = {kEnd, kHello, kEnd, kBos, kWorld, kEnd};
  EXPECT_EQ(*tokenizer->Decode(around, SpecialTokens::kKeep),
            "<|end|>hello<|end|><|bos|> world<|end|>");
  EXPECT_EQ(*tokenizer->Decode(around), "hello world");

  IncrementalDetokenizer detok(tokenizer.get());
  std::string streamed;
  for (int32_t id : *ids) {
    auto delta = detok.Next(id);
    ASSERT_TRUE(delta.ok());
    EXPECT_TRUE(IsValidUtf8(*delta));
    EXPECT_EQ(delta->find("\xEF\xBF\xBD"), std::string::npos) << *delta;
    streamed += *delta;
  }
  auto tail = detok.Flush();
  ASSERT_TRUE(tail.ok());
  streamed += *tail;
  EXPECT_EQ(streamed, without_special);

  // A prompt that ends inside 界 (E7 | 95 8C): the completion starts with
  // the whole character.
  IncrementalDetokenizer primed(tokenizer.get());
  ASSERT_TRUE(primed.Prime({kHello, B(0xE7)}).ok());
  auto first = primed.Next(B(0x95));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "");
  auto second = primed.Next(B(0x8C));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, "\xE7\x95\x8C");
}

TEST(HfBpeModelTest, TokenizerEncodesLongTextsPiecewiseWithTheSameIds) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  const HfBpeModel* raw = model.get();
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(model));
  EXPECT_TRUE(tokenizer->piecewise());
  std::string text;
  for (int i = 0; text.size() < 3 * Tokenizer::kPieceBytes; ++i) {
    text += absl::StrCat("hello world ", i, "  aaa\n\xE4\xB8\x96 ");
  }
  auto ids = tokenizer->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  const std::vector<int> whole = raw->EncodeText(text);
  EXPECT_EQ(std::vector<int>(ids->begin(), ids->end()), whole);
}

TEST(HfBpeModelTest, ConcurrentEncodesAgree) {
  auto model = Load();
  ASSERT_NE(model, nullptr);
  const std::string text = "hello world aaaa \xE4\xB8\x96 12 it's <sep> x";
  const std::vector<int> expected = model->EncodeText(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 200; ++i) {
        good += model->EncodeText(absl::StrCat(text, i % 7)).size() ==
                expected.size() + 1;
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(ok, ElementsAre(200, 200, 200, 200));
}

TEST(HfBpeModelTest, ByteLevelWithItsRegexAndPrefixSpace) {
  auto model = LoadEdited([](json* j) {
    (*j)["pre_tokenizer"] = {{"type", "ByteLevel"},
                             {"add_prefix_space", true},
                             {"trim_offsets", true},
                             {"use_regex", true}};
  });
  ASSERT_TRUE(model.ok()) << model.status();
  // " hello" has no merge "Ġ hello": Ġ, hello; then " world".
  EXPECT_THAT((*model)->EncodeText("hello world"),
              ElementsAre((*model)->PieceToId("\xC4\xA0"), kHello, kWorld));
  // GPT-2's regex keeps digits together: "12" merges.
  EXPECT_THAT((*model)->EncodeText(" 12"),
              ElementsAre((*model)->PieceToId("\xC4\xA0"), k12));
}

TEST(HfBpeModelTest, DigitsPreTokenizer) {
  for (bool individual : {true, false}) {
    auto model = LoadEdited([individual](json* j) {
      (*j)["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Digits"}, {"individual_digits", individual}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"use_regex", false}}}}};
    });
    ASSERT_TRUE(model.ok()) << model.status();
    if (individual) {
      EXPECT_THAT((*model)->EncodeText("a123"),
                  ElementsAre(B('a'), B('1'), B('2'), B('3')));
    } else {
      EXPECT_THAT((*model)->EncodeText("a123"),
                  ElementsAre(B('a'), k12, B('3')));
    }
  }
}

TEST(HfBpeModelTest, SplitRemovedWithAStringPattern) {
  auto model = LoadEdited([](json* j) {
    (*j)["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers",
                              {{{"type", "Split"},
                                {"pattern", {{"String", "."}}},
                                {"behavior", "Removed"},
                                {"invert", false}},
                               {{"type", "ByteLevel"},
                                {"add_prefix_space", false},
                                {"use_regex", false}}}}};
  });
  ASSERT_TRUE(model.ok()) << model.status();
  // "." is a literal, not "any character"; it is dropped.
  EXPECT_THAT((*model)->EncodeText("he.he"), ElementsAre(kHe, kHe));
}

TEST(HfBpeModelTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  auto model = LoadEdited([](json* j) {
    (*j)["model"]["ignore_merges"] = true;
    (*j)["model"]["vocab"]["hex"] = 400;  // No merge path leads here.
  });
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->EncodeText("hex"), ElementsAre(400));
}

TEST(HfBpeModelTest, RefusesUnsupportedComponentsByName) {
  struct Case {
    std::function<void(json*)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json* j) { (*j)["model"]["type"] = "WordPiece"; }, "WordPiece"},
      {[](json* j) {
         (*j)["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer Lowercase"},
      {[](json* j) {
         (*j)["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre-tokenizer Whitespace"},
      {[](json* j) {
         (*j)["pre_tokenizer"]["pretokenizers"][0]["behavior"] =
             "MergedWithPrevious";
       },
       "MergedWithPrevious"},
      {[](json* j) {
         (*j)["pre_tokenizer"] = {{"type", "Split"},
                                  {"pattern", {{"Regex", "\\s+"}}},
                                  {"behavior", "Isolated"}};
       },
       "no ByteLevel pre-tokenizer"},
      {[](json* j) {
         (*j)["decoder"] = {{"type", "Metaspace"}};
       },
       "decoder Metaspace"},
      {[](json* j) { (*j)["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](json* j) { (*j)["model"]["dropout"] = 0.1; }, "dropout"},
      {[](json* j) { (*j)["added_tokens"][0]["single_word"] = true; },
       "single_word"},
      {[](json* j) { (*j)["added_tokens"][0]["id"] = 1 << 30; },
       "malformed added token"},
      {[](json* j) { (*j)["model"]["vocab"]["zz"] = 1 << 25; }, "not an id"},
      {[](json* j) {
         (*j)["model"]["merges"].push_back({"zz", "q"});
       },
       "not in the vocabulary"},
      {[](json* j) {
         (*j)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(";
       },
       "does not compile"},
  };
  for (const Case& c : cases) {
    auto model = LoadEdited(c.edit);
    ASSERT_FALSE(model.ok()) << c.message;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr(c.message));
  }
  auto garbage = HfBpeModel::FromJson("{not json", "");
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("not a JSON object"));
}

TEST(HfBpeModelTest, MalformedFilesAreErrorsNotExceptions) {
  // Replace random nodes of the test file (and of a config) with values of
  // other types: every result is a model or a Status, never a throw.
  const json original = json::parse(ReadTestData());
  json flat = original.flatten();
  std::vector<std::string> paths;
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    // Skip most of the 256 byte tokens: mutate structure, not just ids.
    if (it.key().rfind("/model/vocab/", 0) == 0 && paths.size() % 16 != 0) {
      paths.push_back("/model/vocab");
      continue;
    }
    paths.push_back(it.key());
  }
  for (const char* p : {"/model", "/model/merges", "/added_tokens",
                        "/pre_tokenizer", "/pre_tokenizer/pretokenizers",
                        "/normalizer", "/decoder", "/post_processor"}) {
    paths.push_back(p);
  }
  const std::vector<json> replacements = {nullptr,
                                          7,
                                          -1,
                                          1e300,
                                          "x",
                                          "",
                                          true,
                                          json::array(),
                                          json::object(),
                                          json::array({1, "a"}),
                                          json::object({{"type", 3}})};
  std::mt19937 rng(3);
  int ok = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    json mutated = original;
    const int edits = 1 + rng() % 3;
    for (int e = 0; e < edits; ++e) {
      const json::json_pointer ptr(paths[rng() % paths.size()]);
      if (!mutated.contains(ptr)) continue;
      mutated[ptr] = replacements[rng() % replacements.size()];
    }
    json config = {{"bos_token", replacements[rng() % replacements.size()]},
                   {"add_bos_token", replacements[rng() % replacements.size()]},
                   {"eos_token", replacements[rng() % replacements.size()]}};
    absl::StatusOr<std::unique_ptr<HfBpeModel>> model =
        absl::InternalError("not run");
    ASSERT_NO_THROW(model = HfBpeModel::FromJson(mutated.dump(), config.dump()))
        << mutated.dump();
    if (model.ok()) {
      ++ok;
      ASSERT_NO_THROW(
          (*model)->EncodeText("hello world<|end|> 12 \xE4\xB8\x96"));
    }
  }
  EXPECT_GT(ok, 0);
}

TEST(HfBpeModelTest, BosAndEosFromTheTokenizerConfig) {
  auto model = Load(R"({"bos_token": "<|bos|>", "add_bos_token": true,
                       "eos_token": {"content": "<|end|>"}})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->bos_id(), kBos);
  EXPECT_EQ(model->eos_id(), kEnd);
  // A bos_token that is not added (Qwen-style configs) is no BOS.
  model = Load(R"({"bos_token": "<|bos|>", "add_bos_token": false})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->bos_id(), -1);
  // Without the flag: a post-processor template that starts with a special
  // token.
  auto templated = LoadEdited([](json* j) {
    (*j)["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  });
  ASSERT_TRUE(templated.ok()) << templated.status();
  EXPECT_EQ((*templated)->bos_id(), kBos);
}

std::string MakeModelDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  EXPECT_FALSE(error) << dir << ": " << error.message();
  std::ofstream(dir + "/tokenizer.json") << ReadTestData();
  return dir;
}

TEST(LoadHfTokenizerTest, ModelDirectoryWithOnlyTokenizerJson) {
  const std::string dir = MakeModelDir("only_tokenizer_json");
  auto piece_model = LoadHfTokenizer(dir + "/tokenizer.json");
  ASSERT_TRUE(piece_model.ok()) << piece_model.status();
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(*piece_model));
  auto ids = tokenizer->Encode("hello world", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(kHello, kWorld));
  auto text = tokenizer->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello world");
  EXPECT_EQ(tokenizer->eos_id(), -1);
}

TEST(LoadHfTokenizerTest, TokenizerLoadFromModelDirUsesTokenizerJson) {
  const std::string dir = MakeModelDir("model_dir_only_tokenizer_json");
  auto tokenizer = Tokenizer::LoadFromModelDir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->Encode("hello world<|end|>", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(kHello, kWorld, kEnd));
  auto text = (*tokenizer)->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello world");

  // Encoded whole: a piecewise cut right after "<sep>" (rstrip) would leave
  // the space it swallows to the next piece.
  EXPECT_FALSE((*tokenizer)->piecewise());
  std::string long_text;
  while (long_text.size() < Tokenizer::kPieceBytes - 5) long_text += "ab ";
  long_text.resize(Tokenizer::kPieceBytes - 5);
  long_text += "<sep> x and more text";
  auto long_ids = (*tokenizer)->Encode(long_text, false);
  ASSERT_TRUE(long_ids.ok());
  auto direct = LoadHfBpeModel(dir + "/tokenizer.json");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(std::vector<int>(long_ids->begin(), long_ids->end()),
            (*direct)->EncodeText(long_text));

  // A tokenizer.model beside it wins (here a corrupt one: its error).
  std::ofstream(dir + "/tokenizer.model") << "garbage";
  auto spm = Tokenizer::LoadFromModelDir(dir);
  ASSERT_FALSE(spm.ok());
  EXPECT_THAT(spm.status().message(), HasSubstr("tokenizer.model"));

  // Neither file: NotFound, naming tokenizer.model as before.
  auto none = Tokenizer::LoadFromModelDir(dir + "/nonexistent");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

TEST(LoadHfTokenizerTest, EosFromConfigJsonWhenTheTokenizerConfigHasNone) {
  const std::string dir = MakeModelDir("with_config_json");
  std::ofstream(dir + "/config.json") << R"({"eos_token_id": [273, 1]})";
  auto model = LoadHfBpeModel(dir + "/tokenizer.json");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->eos_id(), kEnd);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "a"})";
  model = LoadHfBpeModel(dir + "/tokenizer.json");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->eos_id(), B('a'));
}

TEST(LoadHfTokenizerTest, MissingAndMalformedFiles) {
  auto missing = LoadHfTokenizer("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string dir = MakeModelDir("malformed");
  std::ofstream(dir + "/tokenizer.json") << "[1, 2";
  auto malformed = LoadHfTokenizer(dir + "/tokenizer.json");
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr(dir));
}

}  // namespace
}  // namespace moeserve::engine::hf_tokenizer
