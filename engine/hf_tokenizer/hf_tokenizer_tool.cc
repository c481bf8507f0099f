// hf_tokenizer_tool: runs a tokenizer.json over a corpus through
// engine::Tokenizer (the parity test's C++ side) or benchmarks encode.
//
//   hf_tokenizer_tool parity TOKENIZER_JSON CORPUS OUT_JSON
//     The corpus is cut into cases at lines "%%%" (one trailing newline of
//     the file dropped); the whole file is one more case. Writes a JSON list
//     of {"text", "ids", "decoded", "decoded_skip"} per case, as
//     parity_reference.mjs does. Exits 1 when, for a case, Tokenizer::Encode
//     (piecewise) and HfBpeModel::EncodeText disagree, the incremental
//     detokenizer's deltas do not add up to the decoded text, or
//     Tokenizer::Decode keeping special tokens ("decoded") differs from
//     HfBpeModel::DecodeIds(ids, false).
//   hf_tokenizer_tool bench TOKENIZER_JSON CORPUS [MIB]
//     Encodes MIB (default 1) MiB made of the corpus repeated, once with a
//     cold word cache and once warm, and prints MB/s.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "engine/hf_tokenizer/hf_bpe_model.h"
#include "engine/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using moeserve::engine::IncrementalDetokenizer;
using moeserve::engine::SpecialTokens;
using moeserve::engine::Tokenizer;
using moeserve::engine::hf_tokenizer::HfBpeModel;
using moeserve::engine::hf_tokenizer::LoadHfBpeModel;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

std::vector<std::string> Cases(std::string corpus) {
  if (!corpus.empty() && corpus.back() == '\n') corpus.pop_back();
  std::vector<std::string> cases = absl::StrSplit(corpus, "\n%%%\n");
  cases.push_back(corpus);
  return cases;
}

int Parity(const std::string& tokenizer_path, const std::string& corpus_path,
           const std::string& out_path) {
  auto loaded = LoadHfBpeModel(tokenizer_path);
  if (!loaded.ok()) {
    std::cerr << loaded.status() << "\n";
    return 2;
  }
  // A second instance for engine::Tokenizer (which takes ownership).
  auto for_tokenizer = LoadHfBpeModel(tokenizer_path);
  if (!for_tokenizer.ok()) return 2;
  const HfBpeModel& model = **loaded;
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(*for_tokenizer));
  std::string corpus;
  if (!ReadFile(corpus_path, &corpus)) {
    std::cerr << corpus_path << ": cannot read\n";
    return 2;
  }
  int failures = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& text : Cases(corpus)) {
    auto ids = tokenizer->Encode(text, /*add_bos=*/false);
    if (!ids.ok()) {
      std::cerr << "encode failed: " << ids.status() << "\n";
      return 2;
    }
    const std::vector<int> direct = model.EncodeText(text);
    if (std::vector<int>(ids->begin(), ids->end()) != direct) {
      std::cerr << "Tokenizer::Encode != EncodeText for: " << text << "\n";
      ++failures;
    }
    auto decoded = tokenizer->Decode(*ids);
    if (!decoded.ok()) {
      std::cerr << "decode failed: " << decoded.status() << "\n";
      return 2;
    }
    IncrementalDetokenizer detok(tokenizer.get());
    std::string stream;
    for (int32_t id : *ids) {
      auto delta = detok.Next(id);
      if (!delta.ok()) return 2;
      stream += *delta;
    }
    auto tail = detok.Flush();
    if (!tail.ok()) return 2;
    stream += *tail;
    if (stream != *decoded) {
      std::cerr << "incremental detokenization differs for: " << text << "\n";
      ++failures;
    }
    // The reference's decode keeps special tokens by default: compared
    // with Tokenizer::Decode(kKeep), which the Tokenize RPC answers with.
    auto decoded_keep = tokenizer->Decode(*ids, SpecialTokens::kKeep);
    if (!decoded_keep.ok()) return 2;
    const std::vector<int> as_int(ids->begin(), ids->end());
    if (*decoded_keep != model.DecodeIds(as_int, false)) {
      std::cerr << "Decode(kKeep) != DecodeIds(ids, false) for: " << text
                << "\n";
      ++failures;
    }
    out.push_back({{"text", text},
                   {"ids", as_int},
                   {"decoded", *decoded_keep},
                   {"decoded_skip", *decoded}});
  }
  std::ofstream file(out_path, std::ios::binary);
  file << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace)
       << "\n";
  if (!file) {
    std::cerr << out_path << ": cannot write\n";
    return 2;
  }
  std::cerr << "hf_tokenizer_tool: " << out.size() << " cases, " << failures
            << " internal mismatches\n";
  return failures == 0 ? 0 : 1;
}

int Bench(const std::string& tokenizer_path, const std::string& corpus_path,
          int mib) {
  auto loaded = LoadHfBpeModel(tokenizer_path);
  if (!loaded.ok()) {
    std::cerr << loaded.status() << "\n";
    return 2;
  }
  std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::FromPieceModel(std::move(*loaded));
  std::string corpus;
  if (!ReadFile(corpus_path, &corpus) || corpus.empty()) return 2;
  std::string text;
  const size_t size = static_cast<size_t>(mib) << 20;
  for (int round = 0; text.size() < size; ++round) {
    // Vary the numbers so that not every word repeats exactly.
    text += std::to_string(round * 7919) + " " + corpus;
  }
  text.resize(size);
  while (!text.empty() &&
         (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) {
    text.pop_back();  // Do not end inside a character.
  }
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) {
    text.pop_back();
  }
  for (const char* label : {"cold cache", "warm cache"}) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = tokenizer->Encode(text, false);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (!ids.ok()) return 2;
    std::printf("encode %zu bytes (%s): %zu tokens in %.3f s = %.1f MB/s\n",
                text.size(), label, ids->size(), s, text.size() / s / 1e6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "parity") {
    return Parity(args[1], args[2], args[3]);
  }
  if ((args.size() == 3 || args.size() == 4) && args[0] == "bench") {
    return Bench(args[1], args[2], args.size() == 4 ? std::stoi(args[3]) : 1);
  }
  std::cerr
      << "usage: hf_tokenizer_tool parity TOKENIZER_JSON CORPUS OUT_JSON\n"
         "       hf_tokenizer_tool bench TOKENIZER_JSON CORPUS [MIB]\n";
  return 2;
}
