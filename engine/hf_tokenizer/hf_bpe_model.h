#ifndef MOESERVE_ENGINE_HF_TOKENIZER_HF_BPE_MODEL_H_
#define MOESERVE_ENGINE_HF_TOKENIZER_HF_BPE_MODEL_H_

// HfBpeModel: a Hugging Face `tokenizer.json` byte-level BPE tokenizer (the
// Qwen2/Qwen3/OLMoE/DeepSeek families) as an internal::PieceModel, so that
// engine::Tokenizer (encode, decode, incremental detokenization, BOS/EOS)
// runs on it exactly as on a sentencepiece model.
//
// Encode follows HF tokenizers: added tokens are split out first
// (leftmost-longest; those with normalized=false on the raw text, the others
// after normalization; lstrip/rstrip swallow the whitespace beside them),
// the rest is normalized (NFC or none), pre-tokenized (Sequence, Split with a
// Regex or String and behavior Isolated or Removed, ByteLevel with or without
// its regex and add_prefix_space, Digits), and every pre-token is turned
// into bytes -> GPT-2 byte characters -> BPE merges by rank (the lowest rank
// first, leftmost among equals), with a per-word cache (words up to 256
// bytes, 16 MiB at most). Decode maps the
// tokens back to bytes (the ByteLevel decoder) and replaces ill-formed UTF-8
// with U+FFFD as Rust's from_utf8_lossy does. Anything else in the file
// (WordPiece, Unigram, another normalizer, pre-tokenizer or decoder, BPE
// dropout, byte_fallback, subword prefixes, single_word added tokens) is
// refused at load with an error that names it.
//
// PieceModel semantics: IdToPiece is the vocabulary string ("Ġthe"); control
// pieces are the added tokens marked special (they decode to nothing);
// IsByte is true for a token whose bytes are not complete UTF-8 on their own
// (part of a character), which is where an incremental detokenizer must
// wait. A text that is not valid UTF-8 is encoded as its lossy conversion.
//
// Owns the vocabulary, merges, compiled regexes and the word cache.
// Thread-safety: immutable after load except the cache (internally locked);
// every const method may be called concurrently.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "engine/internal/piece_model.h"

namespace moeserve::engine::hf_tokenizer {

class Regex;

class HfBpeModel : public internal::PieceModel {
 public:
  // Parses the text of a tokenizer.json and, optionally (may be empty), of
  // the tokenizer_config.json beside it (bos_token, add_bos_token,
  // eos_token); `fallback_eos_id` is the EOS when that names none.
  // InvalidArgument for malformed JSON or an unsupported component.
  static absl::StatusOr<std::unique_ptr<HfBpeModel>> FromJson(
      absl::string_view tokenizer_json, absl::string_view config_json,
      int fallback_eos_id = -1);
  ~HfBpeModel() override;

  // The ids of `text`; no BOS/EOS or other post-processing.
  std::vector<int> EncodeText(absl::string_view text) const;
  // Text of `ids` (each in [0, vocab_size())); special added tokens are
  // kept as their content unless `skip_special`.
  std::string DecodeIds(const std::vector<int>& ids, bool skip_special) const;
  // Id of a vocabulary string or added token's content; -1 if none.
  int PieceToId(absl::string_view piece) const;

  // internal::PieceModel.
  bool Encode(const std::string& text, std::vector<int>* ids,
              std::string* error) const override;
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const override;
  std::string IdToPiece(int id) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  int unk_id() const override { return unk_id_; }
  bool IsControl(int id) const override;
  bool IsByte(int id) const override;
  // The token's bytes (GPT-2 byte characters mapped back; an added token's
  // content); "" for a special token.
  std::string PieceBytes(int id) const override;

  // BPE of one pre-token's symbol ids (for tests: merges by rank, leftmost
  // among equal ranks; `heap` picks the O(n log n) path used for long
  // words instead of the quadratic one used for short ones).
  void MergeSymbols(std::vector<int>* symbols, bool heap) const;

 private:
  struct PreStep;
  struct AddedToken;
  struct AddedSet;
  struct Merge {
    int rank;
    int result;
  };
  struct EncodeContext;

  HfBpeModel();
  absl::Status Parse(absl::string_view tokenizer_json,
                     absl::string_view config_json);
  // Splits `text` by the added tokens of `set`; calls emit(piece, -1) for the
  // text between them and emit("", id) for a token.
  template <typename Emit>
  void SplitAdded(absl::string_view text, const AddedSet& set,
                  Emit&& emit) const;
  void EncodeNormalized(absl::string_view text, EncodeContext* ctx,
                        std::vector<int>* out) const;
  void PreTokenize(size_t step, absl::string_view text, EncodeContext* ctx,
                   std::vector<int>* out) const;
  void EncodeWord(absl::string_view word, EncodeContext* ctx,
                  std::vector<int>* out) const;
  const Merge* FindMerge(int left, int right) const;
  void MergeQuadratic(std::vector<int>* symbols) const;
  void MergeHeap(std::vector<int>* symbols) const;

  // Indexed by id: the vocabulary string, its decoded bytes, and flags.
  std::vector<std::string> pieces_;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> flags_;
  absl::flat_hash_map<std::string, int> piece_to_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int, 256> byte_id_;  // Id of each byte's character, or -1.
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<PreStep> pre_steps_;
  std::unique_ptr<AddedSet> raw_added_;         // normalized=false
  std::unique_ptr<AddedSet> normalized_added_;  // normalized=true
  int bos_id_ = -1;
  int eos_id_ = -1;
  int unk_id_ = -1;

  // Word cache, sharded by hash; a shard is emptied when its entries'
  // approximate size passes kCacheShardBytes (so 16 MiB at most in all).
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheShardBytes = 1 << 20;
  static constexpr size_t kCacheMaxWordBytes = 256;
  struct CacheShard {
    base::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int>> words
        ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// Loads a tokenizer.json file (`path`), with the tokenizer_config.json of
// its directory when there is one (and config.json's eos_token_id when
// neither file names an EOS token). NotFound when `path` is missing.
absl::StatusOr<std::unique_ptr<HfBpeModel>> LoadHfBpeModel(
    const std::string& path);
// The same, as the interface engine::Tokenizer::FromPieceModel takes.
absl::StatusOr<std::unique_ptr<internal::PieceModel>> LoadHfTokenizer(
    const std::string& path);

}  // namespace moeserve::engine::hf_tokenizer

#endif  // MOESERVE_ENGINE_HF_TOKENIZER_HF_BPE_MODEL_H_
