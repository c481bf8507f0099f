// `--help` and `--version` for moeserve's binaries.
//
// Abseil's own `--help` lists only the flags defined in the file holding
// main() ("No flags matched" for our binaries, whose flags live beside the
// code that uses them) and `--helpfull` buries ours among Abseil's and
// gRPC's. So each binary describes its flags in topic groups (ProgramHelp)
// and calls HandleHelpAndVersion() before absl::ParseCommandLine():
//
//   --help, -h, -help   the usage line and every group's flags with their
//                       defaults and help text; exit 0
//   --version           "<program> <version> (git <rev>, <mode>)" and the
//                       program's own details (backends, CPU kernels); exit 0
//   --helpfull          still Abseil's (every flag in the process)
#ifndef MOESERVE_BASE_FLAG_HELP_H_
#define MOESERVE_BASE_FLAG_HELP_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moeserve::base {

struct FlagGroup {
  std::string title;               // "Model", "Network and security", ...
  std::vector<std::string> flags;  // flag names without dashes, in order
};

struct ProgramHelp {
  std::string program;  // "moeserve"
  std::string summary;  // one paragraph: what it is and the common command
  std::vector<FlagGroup> groups;
  // Extra --version lines (backends, kernels); may be empty.
  std::function<std::vector<std::string>()> version_details;
};

// The --help text. A flag named in a group but not linked into the binary
// is shown as "(not in this build)" so that a stale group is visible.
std::string FormatHelp(const ProgramHelp& help);

// The --version text.
std::string FormatVersion(const ProgramHelp& help);

// Names of flags defined in source files whose path contains
// `file_substring` (e.g. "server/") that no group lists: a test asserts this
// is empty so that a new flag cannot be left out of --help.
std::vector<std::string> UngroupedFlags(const ProgramHelp& help,
                                        const std::string& file_substring);

// When argv holds --help/-h/-help or --version, prints the text to stdout
// and returns the exit status (0); otherwise nullopt and the caller goes on
// to absl::ParseCommandLine.
std::optional<int> HandleHelpAndVersion(int argc, char** argv,
                                        const ProgramHelp& help);

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_FLAG_HELP_H_
