#include "engine/hf_tokenizer/hf_bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <queue>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/hf_tokenizer/regex.h"
#include "engine/hf_tokenizer/unicode_util.h"
#include "engine/json_util.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::hf_tokenizer {

using json = nlohmann::json;

namespace {

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex: true).
constexpr absl::string_view kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr uint8_t kFlagSpecial = 1;  // A special added token (control).
constexpr uint8_t kFlagPartial = 2;  // Bytes that are not complete UTF-8.

// Ids above this are refused (the per-id tables are sized by the largest id;
// real vocabularies stay below a million).
constexpr int64_t kMaxTokenId = (1 << 24) - 1;

// Words longer than this many symbols are merged with the heap.
constexpr size_t kHeapMergeSymbols = 48;

const json* Field(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool GetBool(const json& object, const char* key, bool fallback) {
  const json* v = Field(object, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

// A string field, or "" when it is absent or null.
absl::StatusOr<std::string> GetString(const json& object, const char* key,
                                      absl::string_view where) {
  const json* v = Field(object, key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, " is not a string"));
  }
  return v->get<std::string>();
}

std::string TypeOf(const json& component) {
  const json* t = Field(component, "type");
  return t != nullptr && t->is_string() ? t->get<std::string>() : "(no type)";
}

// A token name of tokenizer_config.json: a string or {"content": "..."}.
std::string TokenName(const json& config, const char* key) {
  const json* v = Field(config, key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  const json* content = Field(*v, "content");
  return content != nullptr && content->is_string()
             ? content->get<std::string>()
             : "";
}

// The bytes a token decodes to (HF's ByteLevel decoder): each character's
// byte when every character is one of the byte table's, else the token's
// own text.
std::string TokenBytes(absl::string_view piece) {
  std::string bytes;
  if (!IsValidUtf8(piece)) return std::string(piece);
  size_t pos = 0;
  while (pos < piece.size()) {
    const int b = CharToByte(NextCodePoint(piece, &pos));
    if (b < 0) return std::string(piece);
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

}  // namespace

// One pre-tokenizer of the sequence.
struct HfBpeModel::PreStep {
  enum Kind { kSplit, kByteLevel };
  Kind kind = kSplit;
  std::unique_ptr<Regex> regex;  // Null for ByteLevel without its regex.
  bool remove = false;           // Split behavior Removed.
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel.
};

struct HfBpeModel::AddedToken {
  std::string content;
  int id;
  bool lstrip;
  bool rstrip;
};

// Added tokens matched together, indexed by first byte, longest first.
struct HfBpeModel::AddedSet {
  std::vector<AddedToken> tokens;
  std::array<std::vector<int>, 256> by_first_byte;
  bool empty() const { return tokens.empty(); }
  void Index() {
    for (auto& v : by_first_byte) v.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      by_first_byte[static_cast<unsigned char>(tokens[i].content[0])].push_back(
          static_cast<int>(i));
    }
    for (auto& v : by_first_byte) {
      std::stable_sort(v.begin(), v.end(), [this](int a, int b) {
        return tokens[a].content.size() > tokens[b].content.size();
      });
    }
  }
};

// Per-Encode scratch: regex match data and one match list per pre-step.
struct HfBpeModel::EncodeContext {
  MatchScratch scratch;
  std::vector<std::vector<std::pair<size_t, size_t>>> matches;
  std::vector<int> symbols;
};

HfBpeModel::HfBpeModel()
    : raw_added_(std::make_unique<AddedSet>()),
      normalized_added_(std::make_unique<AddedSet>()) {
  byte_id_.fill(-1);
}

HfBpeModel::~HfBpeModel() = default;

absl::StatusOr<std::unique_ptr<HfBpeModel>> HfBpeModel::FromJson(
    absl::string_view tokenizer_json, absl::string_view config_json,
    int fallback_eos_id) {
  std::unique_ptr<HfBpeModel> model(new HfBpeModel());
  MOESERVE_RETURN_IF_ERROR(model->Parse(tokenizer_json, config_json));
  if (model->eos_id_ < 0 && fallback_eos_id < model->vocab_size()) {
    model->eos_id_ = fallback_eos_id;
  }
  return model;
}

absl::Status HfBpeModel::Parse(absl::string_view tokenizer_json,
                               absl::string_view config_json) {
  const json root = json::parse(tokenizer_json.begin(), tokenizer_json.end(),
                                nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a JSON object");
  }

  // --- model ---
  const json* model = Field(root, "model");
  if (model == nullptr || !model->is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: no \"model\" object");
  }
  const std::string model_type = TypeOf(*model);
  if (model_type != "BPE" &&
      !(model_type == "(no type)" && Field(*model, "merges") != nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: model type ", model_type,
                     " is not supported (only byte-level BPE)"));
  }
  if (const json* d = Field(*model, "dropout"); d != nullptr && !d->is_null()) {
    return absl::InvalidArgumentError(
        "tokenizer.json: BPE dropout is not supported");
  }
  if (GetBool(*model, "byte_fallback", false)) {
    return absl::InvalidArgumentError(
        "tokenizer.json: BPE byte_fallback is not supported (only byte-level "
        "BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    MOESERVE_ASSIGN_OR_RETURN(std::string value,
                              GetString(*model, key, "model"));
    if (!value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: BPE ", key, " \"", value, "\" is not supported"));
    }
  }
  ignore_merges_ = GetBool(*model, "ignore_merges", false);

  const json* vocab = Field(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: model.vocab missing");
  }
  int max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: model.vocab[\"", it.key(), "\"] is not an id"));
    }
    max_id = std::max(max_id, it.value().get<int>());
  }
  const json* added = Field(root, "added_tokens");
  if (added != nullptr && !added->is_null() && !added->is_array()) {
    return absl::InvalidArgumentError(
        "tokenizer.json: added_tokens is not a list");
  }
  if (added != nullptr && added->is_array()) {
    for (const json& t : *added) {
      const json* id = Field(t, "id");
      const json* content = Field(t, "content");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() > kMaxTokenId || content == nullptr ||
          !content->is_string() || content->get<std::string>().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: malformed added token ", t.dump()));
      }
      max_id = std::max(max_id, id->get<int>());
    }
  }
  pieces_.assign(max_id + 1, std::string());
  bytes_.assign(max_id + 1, std::string());
  flags_.assign(max_id + 1, 0);
  piece_to_id_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const int id = it.value().get<int>();
    pieces_[id] = it.key();
    piece_to_id_[it.key()] = id;
  }

  // Merges: "a b" strings or ["a", "b"] pairs, in rank order.
  const json* merges = Field(*model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: model.merges missing");
  }
  merges_.reserve(merges->size());
  int rank = 0;
  for (const json& m : *merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != s.npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: merge \"", s, "\" is not \"a b\""));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: malformed merge ", m.dump()));
    }
    const int l = PieceToId(left), r = PieceToId(right);
    const int result = PieceToId(left + right);
    if (l < 0 || r < 0 || result < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: merge \"", left, " ", right,
                       "\" uses a token that is not in the vocabulary"));
    }
    const uint64_t key = (static_cast<uint64_t>(l) << 32) | uint32_t(r);
    // The first (lowest-ranked) occurrence of a pair wins.
    merges_.try_emplace(key, Merge{rank, result});
    ++rank;
  }
  MOESERVE_ASSIGN_OR_RETURN(std::string unk,
                            GetString(*model, "unk_token", "model"));
  if (!unk.empty()) unk_id_ = PieceToId(unk);

  // --- added tokens ---
  if (added != nullptr && added->is_array()) {
    for (const json& t : *added) {
      AddedToken token{t["content"].get<std::string>(), t["id"].get<int>(),
                       GetBool(t, "lstrip", false),
                       GetBool(t, "rstrip", false)};
      if (GetBool(t, "single_word", false)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: added token \"", token.content,
                         "\" has single_word, which is not supported"));
      }
      pieces_[token.id] = token.content;
      piece_to_id_[token.content] = token.id;
      if (GetBool(t, "special", false)) flags_[token.id] |= kFlagSpecial;
      (GetBool(t, "normalized", !GetBool(t, "special", false))
           ? normalized_added_
           : raw_added_)
          ->tokens.push_back(std::move(token));
    }
  }
  raw_added_->Index();
  normalized_added_->Index();
  for (size_t id = 0; id < pieces_.size(); ++id) {
    bytes_[id] = TokenBytes(pieces_[id]);
  }
  // Added tokens decode as their content, not through the byte table (as
  // current HF tokenizers and tokenizers.js do: "café" is not c a f 0xE9).
  for (const AddedSet* set : {raw_added_.get(), normalized_added_.get()}) {
    for (const AddedToken& token : set->tokens)
      bytes_[token.id] = token.content;
  }
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (!IsValidUtf8(bytes_[id])) flags_[id] |= kFlagPartial;
  }

  // --- normalizer ---
  const json* normalizer = Field(root, "normalizer");
  if (normalizer != nullptr && !normalizer->is_null()) {
    std::vector<const json*> parts;
    if (TypeOf(*normalizer) == "Sequence") {
      const json* list = Field(*normalizer, "normalizers");
      if (list == nullptr || !list->is_array()) {
        return absl::InvalidArgumentError(
            "tokenizer.json: normalizer Sequence without a list");
      }
      for (const json& n : *list) parts.push_back(&n);
    } else {
      parts.push_back(normalizer);
    }
    for (const json* n : parts) {
      if (TypeOf(*n) != "NFC") {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: normalizer ", TypeOf(*n),
                         " is not supported (only NFC)"));
      }
      nfc_ = true;
    }
  }

  // --- pre-tokenizer ---
  const json* pre = Field(root, "pre_tokenizer");
  std::vector<const json*> steps;
  if (pre != nullptr && !pre->is_null()) {
    if (TypeOf(*pre) == "Sequence") {
      const json* list = Field(*pre, "pretokenizers");
      if (list == nullptr || !list->is_array()) {
        return absl::InvalidArgumentError(
            "tokenizer.json: pre_tokenizer Sequence without a list");
      }
      for (const json& p : *list) steps.push_back(&p);
    } else {
      steps.push_back(pre);
    }
  }
  bool byte_level = false;
  for (const json* p : steps) {
    const std::string type = TypeOf(*p);
    PreStep step;
    if (type == "Split") {
      const json* pattern = Field(*p, "pattern");
      const json* regex = pattern ? Field(*pattern, "Regex") : nullptr;
      const json* literal = pattern ? Field(*pattern, "String") : nullptr;
      const json* source = regex != nullptr ? regex : literal;
      if (source == nullptr || !source->is_string()) {
        return absl::InvalidArgumentError(
            "tokenizer.json: Split without a Regex or String pattern");
      }
      MOESERVE_ASSIGN_OR_RETURN(
          step.regex,
          Regex::Compile(source->get<std::string>(), regex == nullptr));
      MOESERVE_ASSIGN_OR_RETURN(std::string behavior,
                                GetString(*p, "behavior", "Split"));
      if (behavior == "Removed") {
        step.remove = true;
      } else if (behavior != "Isolated") {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: Split behavior ", behavior,
                         " is not supported (only Isolated and Removed)"));
      }
      step.invert = GetBool(*p, "invert", false);
    } else if (type == "ByteLevel") {
      step.kind = PreStep::kByteLevel;
      step.add_prefix_space = GetBool(*p, "add_prefix_space", true);
      if (GetBool(*p, "use_regex", true)) {
        MOESERVE_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kByteLevelRegex));
      }
      byte_level = true;
    } else if (type == "Digits") {
      MOESERVE_ASSIGN_OR_RETURN(
          step.regex,
          Regex::Compile(GetBool(*p, "individual_digits", false) ? "\\p{N}"
                                                                 : "\\p{N}+"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: pre-tokenizer ", type,
          " is not supported (Sequence, Split, ByteLevel, Digits)"));
    }
    pre_steps_.push_back(std::move(step));
  }
  if (!byte_level) {
    return absl::InvalidArgumentError(
        "tokenizer.json: no ByteLevel pre-tokenizer (only byte-level BPE is "
        "supported)");
  }
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendUtf8(ByteToChar()[b], &c);
    auto it = piece_to_id_.find(c);
    byte_id_[b] = it == piece_to_id_.end() ? -1 : it->second;
  }

  // --- decoder ---
  const json* decoder = Field(root, "decoder");
  if (decoder == nullptr || decoder->is_null()) {
    return absl::InvalidArgumentError(
        "tokenizer.json: no decoder (expected ByteLevel)");
  }
  std::vector<const json*> decoders;
  if (TypeOf(*decoder) == "Sequence") {
    const json* list = Field(*decoder, "decoders");
    if (list == nullptr || !list->is_array()) {
      return absl::InvalidArgumentError(
          "tokenizer.json: decoder Sequence without a list");
    }
    for (const json& d : *list) decoders.push_back(&d);
  } else {
    decoders.push_back(decoder);
  }
  for (const json* d : decoders) {
    if (TypeOf(*d) != "ByteLevel") {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: decoder ", TypeOf(*d),
                       " is not supported (only ByteLevel)"));
    }
  }

  // --- BOS / EOS ---
  json config;
  if (!config_json.empty()) {
    config = json::parse(config_json.begin(), config_json.end(), nullptr,
                         /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(
          "tokenizer_config.json: not a JSON object");
    }
  }
  // BOS only when the tokenizer adds it: add_bos_token in the config, or a
  // post-processor template that starts with a special token.
  int template_bos = -1;
  if (const json* post = Field(root, "post_processor"); post != nullptr) {
    std::vector<const json*> posts = {post};
    if (TypeOf(*post) == "Sequence") {
      posts.clear();
      if (const json* list = Field(*post, "processors");
          list != nullptr && list->is_array()) {
        for (const json& p : *list) posts.push_back(&p);
      }
    }
    for (const json* p : posts) {
      if (TypeOf(*p) != "TemplateProcessing") continue;
      const json* single = Field(*p, "single");
      if (single == nullptr || !single->is_array() || single->empty()) continue;
      const json* special = Field((*single)[0], "SpecialToken");
      const json* name = special ? Field(*special, "id") : nullptr;
      if (name != nullptr && name->is_string()) {
        template_bos = PieceToId(name->get<std::string>());
      }
    }
  }
  const std::string bos_name = TokenName(config, "bos_token");
  const json* add_bos = Field(config, "add_bos_token");
  if (add_bos != nullptr && add_bos->is_boolean()) {
    bos_id_ =
        add_bos->get<bool>() && !bos_name.empty() ? PieceToId(bos_name) : -1;
  } else {
    bos_id_ = template_bos;
  }
  const std::string eos_name = TokenName(config, "eos_token");
  if (!eos_name.empty()) eos_id_ = PieceToId(eos_name);
  return absl::OkStatus();
}

int HfBpeModel::PieceToId(absl::string_view piece) const {
  auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

const HfBpeModel::Merge* HfBpeModel::FindMerge(int left, int right) const {
  auto it = merges_.find((static_cast<uint64_t>(left) << 32) | uint32_t(right));
  return it == merges_.end() ? nullptr : &it->second;
}

void HfBpeModel::MergeSymbols(std::vector<int>* symbols, bool heap) const {
  if (symbols->size() < 2) return;
  if (heap || symbols->size() > kHeapMergeSymbols) {
    MergeHeap(symbols);
  } else {
    MergeQuadratic(symbols);
  }
}

void HfBpeModel::MergeQuadratic(std::vector<int>* symbols) const {
  std::vector<int>& s = *symbols;
  // ranks[i]: rank of the pair (s[i], s[i+1]), INT_MAX if it is no merge.
  int ranks[kHeapMergeSymbols];
  int results[kHeapMergeSymbols];
  size_t n = s.size();
  auto fill = [&](size_t i) {
    const Merge* m = FindMerge(s[i], s[i + 1]);
    ranks[i] = m ? m->rank : INT_MAX;
    results[i] = m ? m->result : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT_MAX) break;
    s[best] = results[best];
    s.erase(s.begin() + best + 1);
    std::copy(ranks + best + 1, ranks + n - 1, ranks + best);
    std::copy(results + best + 1, results + n - 1, results + best);
    --n;
    if (best + 1 < n) fill(best);
    if (best > 0) fill(best - 1);
  }
}

void HfBpeModel::MergeHeap(std::vector<int>* symbols) const {
  std::vector<int>& s = *symbols;
  const int n = static_cast<int>(s.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // (rank, position of the left symbol): the lowest rank first, then the
  // leftmost.
  using Entry = std::pair<int, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  for (int i = 0; i + 1 < n; ++i) {
    if (const Merge* m = FindMerge(s[i], s[i + 1])) queue.push({m->rank, i});
  }
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const auto [rank, pos] = queue.top();
    queue.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    const Merge* m = FindMerge(s[pos], s[next[pos]]);
    if (m == nullptr || m->rank != rank) continue;  // Stale.
    const int gone = next[pos];
    s[pos] = m->result;
    alive[gone] = false;
    next[pos] = next[gone];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    if (prev[pos] >= 0) {
      if (const Merge* left = FindMerge(s[prev[pos]], s[pos])) {
        queue.push({left->rank, prev[pos]});
      }
    }
    if (next[pos] >= 0) {
      if (const Merge* right = FindMerge(s[pos], s[next[pos]])) {
        queue.push({right->rank, pos});
      }
    }
  }
  size_t out = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) s[out++] = s[i];
  s.resize(out);
}

void HfBpeModel::EncodeWord(absl::string_view word, EncodeContext* ctx,
                            std::vector<int>* out) const {
  if (word.size() == 1) {
    const int id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) {
      out->push_back(id);
    } else if (unk_id_ >= 0) {
      out->push_back(unk_id_);
    }
    return;
  }
  CacheShard* shard = nullptr;
  if (word.size() <= kCacheMaxWordBytes) {
    shard = &cache_[absl::Hash<absl::string_view>{}(word) % kCacheShards];
    base::MutexLock lock(&shard->mu);
    auto it = shard->words.find(word);
    if (it != shard->words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int>& symbols = ctx->symbols;
  symbols.clear();
  bool whole = false;
  if (ignore_merges_) {
    std::string mapped;
    for (char c : word) {
      AppendUtf8(ByteToChar()[static_cast<unsigned char>(c)], &mapped);
    }
    if (const int id = PieceToId(mapped); id >= 0) {
      symbols.push_back(id);
      whole = true;
    }
  }
  if (!whole) {
    for (char c : word) {
      const int id = byte_id_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        symbols.push_back(id);
      } else if (unk_id_ >= 0) {
        symbols.push_back(unk_id_);
      }
    }
    MergeSymbols(&symbols, symbols.size() > kHeapMergeSymbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (shard != nullptr) {
    base::MutexLock lock(&shard->mu);
    // Key, ids and about 32 bytes of table and allocation overhead.
    const size_t entry = word.size() + symbols.size() * sizeof(int) + 32;
    if (shard->bytes + entry > kCacheShardBytes) {
      shard->words.clear();
      shard->bytes = 0;
    }
    if (shard->words.emplace(word, symbols).second) shard->bytes += entry;
  }
}

void HfBpeModel::PreTokenize(size_t step, absl::string_view text,
                             EncodeContext* ctx, std::vector<int>* out) const {
  if (text.empty()) return;
  if (step == pre_steps_.size()) {
    EncodeWord(text, ctx, out);
    return;
  }
  const PreStep& p = pre_steps_[step];
  std::string prefixed;
  if (p.kind == PreStep::kByteLevel && p.add_prefix_space && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  if (p.regex == nullptr) {
    PreTokenize(step + 1, text, ctx, out);
    return;
  }
  // Matches are found before recursing: the list for this step is reused.
  std::vector<std::pair<size_t, size_t>>& matches = ctx->matches[step];
  p.regex->FindAll(text, &ctx->scratch, &matches);
  // Isolated: gaps and matches are all pre-tokens. Removed: the gaps only
  // (with invert, the matches only).
  const bool keep_gaps = !p.remove || !p.invert;
  const bool keep_matches = !p.remove || p.invert;
  // The recursion below uses the lists of later steps only.
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (keep_gaps && begin > prev) {
      PreTokenize(step + 1, text.substr(prev, begin - prev), ctx, out);
    }
    if (keep_matches) {
      PreTokenize(step + 1, text.substr(begin, end - begin), ctx, out);
    }
    prev = end;
  }
  if (keep_gaps && prev < text.size()) {
    PreTokenize(step + 1, text.substr(prev), ctx, out);
  }
}

template <typename Emit>
void HfBpeModel::SplitAdded(absl::string_view text, const AddedSet& set,
                            Emit&& emit) const {
  if (set.empty()) {
    emit(text, -1);
    return;
  }
  size_t done = 0;  // Text before this has been emitted.
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates =
        set.by_first_byte[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (int i : candidates) {
      const std::string& c = set.tokens[i].content;
      if (text.size() - pos >= c.size() &&
          std::memcmp(text.data() + pos, c.data(), c.size()) == 0) {
        hit = &set.tokens[i];
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    if (hit->lstrip) {
      // Back over whitespace, not past what was already emitted.
      while (start > done) {
        size_t q = start - 1;
        while (q > done && (static_cast<unsigned char>(text[q]) & 0xC0) == 0x80)
          --q;
        size_t p = q;
        if (!IsUnicodeWhitespace(NextCodePoint(text, &p))) break;
        start = q;
      }
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t p = stop;
        if (!IsUnicodeWhitespace(NextCodePoint(text, &p))) break;
        stop = p;
      }
    }
    if (start > done) emit(text.substr(done, start - done), -1);
    emit(absl::string_view(), hit->id);
    done = pos = stop;
  }
  if (done < text.size()) emit(text.substr(done), -1);
}

void HfBpeModel::EncodeNormalized(absl::string_view text, EncodeContext* ctx,
                                  std::vector<int>* out) const {
  std::string normalized;
  if (nfc_ && NormalizeNfc(text, &normalized)) text = normalized;
  SplitAdded(text, *normalized_added_, [&](absl::string_view piece, int id) {
    if (id >= 0) {
      out->push_back(id);
    } else {
      PreTokenize(0, piece, ctx, out);
    }
  });
}

std::vector<int> HfBpeModel::EncodeText(absl::string_view text) const {
  std::string clean;
  if (!IsValidUtf8(text)) {
    clean = Utf8Lossy(text);
    text = clean;
  }
  EncodeContext ctx;
  ctx.matches.resize(pre_steps_.size());
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  SplitAdded(text, *raw_added_, [&](absl::string_view piece, int id) {
    if (id >= 0) {
      out.push_back(id);
    } else {
      EncodeNormalized(piece, &ctx, &out);
    }
  });
  return out;
}

std::string HfBpeModel::DecodeIds(const std::vector<int>& ids,
                                  bool skip_special) const {
  std::string bytes;
  for (int id : ids) {
    if (skip_special && (flags_[id] & kFlagSpecial)) continue;
    bytes.append(bytes_[id]);
  }
  return IsValidUtf8(bytes) ? bytes : Utf8Lossy(bytes);
}

bool HfBpeModel::Encode(const std::string& text, std::vector<int>* ids,
                        std::string* error) const {
  *ids = EncodeText(text);
  return true;
}

bool HfBpeModel::Decode(const std::vector<int>& ids, std::string* text,
                        std::string* error) const {
  for (int id : ids) {
    if (id < 0 || id >= vocab_size()) {
      *error = absl::StrCat("token id ", id, " out of range");
      return false;
    }
  }
  *text = DecodeIds(ids, /*skip_special=*/true);
  return true;
}

std::string HfBpeModel::IdToPiece(int id) const {
  return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
}

bool HfBpeModel::IsControl(int id) const {
  return id >= 0 && id < vocab_size() && (flags_[id] & kFlagSpecial);
}

bool HfBpeModel::IsByte(int id) const {
  return id >= 0 && id < vocab_size() && (flags_[id] & kFlagPartial);
}

std::string HfBpeModel::PieceBytes(int id) const {
  if (id < 0 || id >= vocab_size() || (flags_[id] & kFlagSpecial)) return "";
  return bytes_[id];
}

absl::StatusOr<std::unique_ptr<HfBpeModel>> LoadHfBpeModel(
    const std::string& path) {
  if (!json_util::FileExists(path)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": tokenizer.json not found"));
  }
  MOESERVE_ASSIGN_OR_RETURN(std::string text, json_util::ReadFileText(path));
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, slash);
  std::string config;
  if (json_util::FileExists(dir + "/tokenizer_config.json")) {
    MOESERVE_ASSIGN_OR_RETURN(
        config, json_util::ReadFileText(dir + "/tokenizer_config.json"));
  }
  int fallback_eos = -1;
  if (json_util::FileExists(dir + "/config.json")) {
    // The model config's eos_token_id (an id or a list), for a tokenizer
    // config that names no EOS token.
    MOESERVE_ASSIGN_OR_RETURN(std::string cfg,
                              json_util::ReadFileText(dir + "/config.json"));
    const json c = json::parse(cfg, nullptr, /*allow_exceptions=*/false);
    const json* eos = Field(c, "eos_token_id");
    if (eos != nullptr && eos->is_array() && !eos->empty()) eos = &(*eos)[0];
    if (eos != nullptr && eos->is_number_integer() &&
        eos->get<int64_t>() >= 0 && eos->get<int64_t>() < INT_MAX) {
      fallback_eos = eos->get<int>();
    }
  }
  auto model = HfBpeModel::FromJson(text, config, fallback_eos);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(path, ": ", model.status().message()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<internal::PieceModel>> LoadHfTokenizer(
    const std::string& path) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<HfBpeModel> model,
                            LoadHfBpeModel(path));
  return std::unique_ptr<internal::PieceModel>(std::move(model));
}

}  // namespace moeserve::engine::hf_tokenizer
