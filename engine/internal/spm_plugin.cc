// The sentencepiece plugin: libmoeserve_spm.so, loaded by spm_wrapper.cc with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why a plugin: Debian's libsentencepiece.so.0 bundles and exports its own
// protobuf 3.14 runtime. A process that also links the system
// libprotobuf.so.32 (every gRPC binary) crashes in static initialisation.
// Loaded privately with deep binding, sentencepiece resolves protobuf to its
// own copy and the two runtimes never meet.
//
// The interface is extern "C" symbols taking std types by pointer: the plugin
// is built by the same toolchain and libstdc++ as its only caller.
#include <sentencepiece_processor.h>

#include <string>
#include <vector>

using Processor = sentencepiece::SentencePieceProcessor;

extern "C" {

void* moeserve_spm_new() { return new Processor(); }

void moeserve_spm_delete(void* p) { delete static_cast<Processor*>(p); }

bool moeserve_spm_load(void* p, const std::string* path, std::string* error) {
  sentencepiece::util::Status s = static_cast<Processor*>(p)->Load(*path);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool moeserve_spm_encode(const void* p, const std::string* text,
                         std::vector<int>* ids, std::string* error) {
  sentencepiece::util::Status s =
      static_cast<const Processor*>(p)->Encode(*text, ids);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool moeserve_spm_decode(const void* p, const std::vector<int>* ids,
                         std::string* text, std::string* error) {
  sentencepiece::util::Status s =
      static_cast<const Processor*>(p)->Decode(*ids, text);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

void moeserve_spm_id_to_piece(const void* p, int id, std::string* piece) {
  *piece = static_cast<const Processor*>(p)->IdToPiece(id);
}

// Which: 0 vocab size, 1 bos, 2 eos, 3 unk.
int moeserve_spm_special(const void* p, int which) {
  const auto* sp = static_cast<const Processor*>(p);
  switch (which) {
    case 0:
      return sp->GetPieceSize();
    case 1:
      return sp->bos_id();
    case 2:
      return sp->eos_id();
    default:
      return sp->unk_id();
  }
}

// Which: 0 control, 1 byte.
bool moeserve_spm_is(const void* p, int id, int which) {
  const auto* sp = static_cast<const Processor*>(p);
  return which == 0 ? sp->IsControl(id) : sp->IsByte(id);
}

}  // extern "C"
