#ifndef MOESERVE_ENGINE_TOKENIZER_H_
#define MOESERVE_ENGINE_TOKENIZER_H_

// Tokenizer: a sentencepiece model (tokenizer.model of a Hugging Face
// directory) behind absl::Status APIs; IncrementalDetokenizer: streaming
// detokenization for token-by-token responses.
//
// Tokenizer owns the sentencepiece processor. Thread-safety: immutable after
// Load; Encode/Decode/IdToPiece may be called concurrently.
// IncrementalDetokenizer is per sequence and not thread-safe; it borrows the
// Tokenizer, which must outlive it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moeserve::engine {

namespace internal {
class PieceModel;
}

// What Tokenizer::Decode does with control pieces (bos/eos; the special
// added tokens of a tokenizer.json).
enum class SpecialTokens {
  // Dropped: what generated text shows (vLLM's and OpenAI's
  // skip_special_tokens=True for completions).
  kSkip,
  // Kept as their piece text ("<s>", "<|im_start|>"): Hugging Face's
  // tokenizer.decode default (skip_special_tokens=False), and what the
  // Tokenize RPC and /detokenize answer unless asked to skip them.
  kKeep,
};

class Tokenizer {
 public:
  // Loads `path` (a sentencepiece model file). NotFound when it is missing,
  // InvalidArgument when sentencepiece refuses it.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& path);
  // Loads `<model_dir>/tokenizer.model`, or `<model_dir>/tokenizer.json`
  // (Hugging Face byte-level BPE, engine/hf_tokenizer; encoded whole, not
  // piecewise) when there is no tokenizer.model.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromModelDir(
      const std::string& model_dir);
  // A tokenizer over another vocabulary implementation (tests: see
  // engine/testing/fake_tokenizer.h).
  static std::unique_ptr<Tokenizer> FromPieceModel(
      std::unique_ptr<internal::PieceModel> model);

  ~Tokenizer();

  // Token ids of `text`, preceded by bos_id() when `add_bos` (and the model
  // has a bos piece).
  //
  // Memory: sentencepiece works with ~110 bytes per byte of the text it is
  // given (the demo tokenizer; engine/README.md). So a text is encoded in
  // pieces of about kPieceBytes, cut before a space that ends a word, each
  // after the first behind the anchor piece whose ids are then dropped:
  // the same ids as one call (checked on probe texts when the tokenizer is
  // made: piecewise() is false, and texts are encoded whole, for a model
  // whose pieces may span such a cut). After a text of kTrimAfterBytes or
  // more the freed pages are returned to the system.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_bos) const;
  // Encode in one sentencepiece call, whatever the length (tests).
  absl::StatusOr<std::vector<int32_t>> EncodeWhole(absl::string_view text,
                                                   bool add_bos) const;
  // Text of `ids`; InvalidArgument for ids outside [0, vocab_size()).
  // Control pieces decode to nothing (kSkip) or to their piece text
  // (kKeep). With kKeep the text between them decodes as it would in the
  // middle of a text (a leading "▁" stays a space), so [<s>, "▁hi", </s>]
  // is "<s> hi</s>", as Hugging Face's fast Llama/Mistral tokenizers give;
  // only the start of the whole text drops its leading space.
  absl::StatusOr<std::string> Decode(
      const std::vector<int32_t>& ids,
      SpecialTokens special = SpecialTokens::kSkip) const;
  // The piece (e.g. "▁the", "<0xE2>"); InvalidArgument when out of range.
  absl::StatusOr<std::string> IdToPiece(int32_t id) const;
  // The bytes token `id` adds to a text in the middle of a sequence
  // (" the" for "▁the" or "Ġthe"; one byte, possibly part of a UTF-8
  // character, for "<0xE2>"; "" for a control token): what an API's
  // per-token logprobs show. InvalidArgument when out of range.
  absl::StatusOr<std::string> TokenBytes(int32_t id) const;

  // Encode's piece size, and the text length after which it returns freed
  // memory to the system.
  static constexpr size_t kPieceBytes = 16 << 10;
  static constexpr size_t kTrimAfterBytes = 32 << 10;
  // Whether Encode cuts long texts into pieces (see Encode).
  bool piecewise() const { return piecewise_; }

  int32_t bos_id() const;  // -1 when the model defines none.
  int32_t eos_id() const;
  int32_t vocab_size() const;

 private:
  explicit Tokenizer(std::unique_ptr<internal::PieceModel> model);
  friend class IncrementalDetokenizer;
  absl::Status CheckIds(const std::vector<int32_t>& ids) const;
  // Text of `ids` as in the middle of a text: decoded behind the anchor
  // piece, whose text is then cut off (plain Decode when there is none).
  absl::StatusOr<std::string> DecodeAfterText(
      std::vector<int32_t>::const_iterator begin,
      std::vector<int32_t>::const_iterator end) const;
  // Decode with SpecialTokens::kKeep.
  absl::StatusOr<std::string> DecodeKeepingSpecial(
      const std::vector<int32_t>& ids) const;
  void FindAnchor();
  void CheckPiecewise();
  // Appends the ids of `text`, cut into pieces of about `piece_bytes`.
  absl::Status EncodePiecewise(absl::string_view text, size_t piece_bytes,
                               std::vector<int32_t>* out) const;
  // Appends the ids of `piece`; `after_text`: as in the middle of a text
  // (FAILED_PRECONDITION when the anchor merged into the piece).
  absl::Status EncodePiece(absl::string_view piece, bool after_text,
                           std::vector<int32_t>* out) const;
  static void ReturnFreedMemory();

  std::unique_ptr<internal::PieceModel> spm_;
  // A normal piece without a leading "▁" and its text; -1 if none exists.
  int32_t anchor_id_ = -1;
  std::string anchor_text_;
  // The anchor's ids when encoded alone, and whether Encode cuts long texts.
  std::vector<int32_t> anchor_ids_;
  bool piecewise_ = false;
};

// Turns a stream of token ids into a stream of text deltas, each valid UTF-8,
// whose concatenation equals tokenizer.Decode(all ids) (once Flush is
// called).
//
// Approach (as in vLLM/TGI): keep two offsets into the id list,
// prefix_offset <= read_offset. On each token decode ids[prefix_offset:] and
// ids[prefix_offset:read_offset]; the new text is the difference, and the
// window keeps the cost per token bounded. sentencepiece drops *all* leading
// whitespace of a decode (decode("▁", "▁the") == "the"), which is right for
// the start of the sequence but wrong mid-sequence; so a window that does not
// start at 0 is decoded behind an anchor piece (a plain piece such as "a"
// that absorbs the leading-whitespace rule) whose text is then cut off. When
// the new text ends in U+FFFD (what sentencepiece emits for an incomplete
// byte-fallback sequence such as <0xE4><0xB8>) or in an incomplete UTF-8
// sequence, nothing is emitted and the window grows until the character
// completes.
//
// A primed prompt that ends inside a character (token-id prompts can end in
// <0xE4><0xB8>) leaves that unfinished tail in the window. The generated
// text never carries the prompt's bytes as U+FFFD: if the generated tokens
// complete the character, the whole character is generated text; if they do
// not, the tail's U+FFFD belong to the prompt and are dropped (so the deltas
// add up to Decode(all ids) less those U+FFFD).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer)
      : tokenizer_(tokenizer) {}

  // Appends `id`; returns the text that became stable (possibly empty).
  absl::StatusOr<std::string> Next(int32_t id);
  // Appends `ids` (a prompt) without returning text: the same state as
  // Next(id) for each id with the text dropped, at the cost of a few Next
  // calls rather than one per id. Only the tail is run through Next: from
  // kPrimeContext plain pieces before the trailing run of byte-fallback,
  // control and unknown pieces (an unfinished character can only sit
  // there); everything before it is taken as stable text, which is what
  // Next concludes after a plain piece.
  absl::Status Prime(const std::vector<int32_t>& ids);
  // Returns whatever is still held back (an unfinished character decodes as
  // U+FFFD). Call once at the end of the sequence.
  absl::StatusOr<std::string> Flush();

  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  absl::StatusOr<std::string> DecodeRange(size_t begin, size_t end) const;
  // What of `text` (the decode of ids_[prefix_offset_:]) is new beyond
  // `prefix` (the decode of ids_[prefix_offset_:read_offset_]), less the
  // U+FFFD of a prompt tail that no generated id completed.
  absl::StatusOr<std::string> NewText(const std::string& text,
                                      const std::string& prefix) const;

  // Plain pieces Prime runs through Next before the prompt's trailing run
  // of other pieces, so that its offsets settle as they would have.
  static constexpr size_t kPrimeContext = 4;

  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  // ids_.size() after Prime: ids before it are the prompt's.
  size_t prompt_end_ = 0;
};

// True when `text` ends inside a multi-byte UTF-8 sequence.
bool EndsWithIncompleteUtf8(absl::string_view text);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_TOKENIZER_H_
