#include "tools/bench/stand_in_tokenizer.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moeserve::bench {
namespace {

// Protobuf wire types and the field numbers of sentencepiece_model.proto
// that the stand-in uses.
constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;
constexpr int kModelPieces = 1;  // ModelProto.pieces
constexpr int kPieceText = 1;    // SentencePiece.piece
constexpr int kPieceScore = 2;   // SentencePiece.score
constexpr int kPieceType = 3;    // SentencePiece.type
constexpr int kTypeNormal = 1;   // SentencePiece.Type
constexpr int kTypeUnknown = 2;
constexpr int kTypeControl = 3;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(int field, int wire_type, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | wire_type, out);
}

void PutBytes(int field, const std::string& bytes, std::string* out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

std::string Piece(const std::string& text, int type) {
  std::string p;
  PutBytes(kPieceText, text, &p);
  PutTag(kPieceScore, kFixed32, &p);
  p.append(4, '\0');  // score 0.0f
  PutTag(kPieceType, kVarint, &p);
  PutVarint(type, &p);
  return p;
}

}  // namespace

std::string StandInTokenizerModel(int64_t vocab) {
  std::string model;
  // The default TrainerSpec names these pieces unk (id 0), bos and eos.
  PutBytes(kModelPieces, Piece("<unk>", kTypeUnknown), &model);
  PutBytes(kModelPieces, Piece("<s>", kTypeControl), &model);
  PutBytes(kModelPieces, Piece("</s>", kTypeControl), &model);
  for (int64_t id = 3; id < vocab; ++id) {
    PutBytes(kModelPieces, Piece(absl::StrCat("t", id), kTypeNormal), &model);
  }
  return model;
}

absl::StatusOr<std::unique_ptr<engine::Tokenizer>> StandInTokenizer(
    int64_t vocab) {
  if (vocab < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("stand-in tokenizer: vocab ", vocab, " < 4"));
  }
  const char* tmp = getenv("TMPDIR");
  std::string path =
      absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/standin_XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("mkstemp ", path, ": ", std::strerror(errno)));
  }
  const std::string model = StandInTokenizerModel(vocab);
  size_t written = 0;
  while (written < model.size()) {
    const ssize_t n = write(fd, model.data() + written, model.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  if (written != model.size()) {
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::Load(path);
  unlink(path.c_str());
  return tokenizer;
}

}  // namespace moeserve::bench
