#include "engine/testing/fake_tokenizer.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/internal/piece_model.h"

namespace moeserve::engine::testing {
namespace {

constexpr char kWordMarker[] = "\xE2\x96\x81";  // U+2581
constexpr int kUnk = 0, kBos = 1, kEos = 2, kAnchor = 3;

class FakePieceModel final : public internal::PieceModel {
 public:
  explicit FakePieceModel(int vocab) : vocab_(vocab) {}

  bool Encode(const std::string& text, std::vector<int>* ids,
              std::string* /*error*/) const override {
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find(' ', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) ids->push_back(WordId(text.substr(start, end - start)));
      start = end + 1;
    }
    return true;
  }

  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* /*error*/) const override {
    text->clear();
    for (int id : ids) {
      if (id == kBos || id == kEos) continue;
      if (id == kUnk) {
        *text += " \xE2\x81\x87 ";  // " ⁇ ", as sentencepiece
      } else if (id == kAnchor) {
        *text += "a";
      } else {
        *text += " w" + std::to_string(id);
      }
    }
    if (!text->empty() && (*text)[0] == ' ') text->erase(0, 1);
    return true;
  }

  std::string IdToPiece(int id) const override {
    switch (id) {
      case kUnk:
        return "<unk>";
      case kBos:
        return "<s>";
      case kEos:
        return "</s>";
      case kAnchor:
        return "a";
      default:
        return kWordMarker + std::string("w") + std::to_string(id);
    }
  }
  int vocab_size() const override { return vocab_; }
  int bos_id() const override { return kBos; }
  int eos_id() const override { return kEos; }
  int unk_id() const override { return kUnk; }
  bool IsControl(int id) const override { return id == kBos || id == kEos; }
  bool IsByte(int /*id*/) const override { return false; }

 private:
  int WordId(const std::string& word) const {
    if (word == "a") return kAnchor;
    if (word.size() < 2 || word[0] != 'w') return kUnk;
    char* end = nullptr;
    const long id = std::strtol(word.c_str() + 1, &end, 10);
    return *end == '\0' && id > kAnchor && id < vocab_ ? static_cast<int>(id)
                                                       : kUnk;
  }

  const int vocab_;
};

}  // namespace

std::unique_ptr<Tokenizer> FakeTokenizer(int vocab) {
  return Tokenizer::FromPieceModel(std::make_unique<FakePieceModel>(vocab));
}

}  // namespace moeserve::engine::testing
