#include "base/flag_help.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/build_info.h"

namespace moeserve::base {
namespace {

// Help text wrapped to `width` columns under an indent.
void AppendWrapped(const std::string& text, size_t indent, size_t width,
                   std::string* out) {
  size_t column = indent;
  out->append(indent, ' ');
  bool first = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!first && column + 1 + word.size() > width) {
      out->append("\n");
      out->append(indent, ' ');
      column = indent;
      first = true;
    }
    if (!first) {
      out->push_back(' ');
      ++column;
    }
    out->append(word.data(), word.size());
    column += word.size();
    first = false;
  }
  out->append("\n");
}

}  // namespace

std::string FormatHelp(const ProgramHelp& help) {
  std::string out = absl::StrCat(help.program, ": ", help.summary, "\n");
  for (const FlagGroup& group : help.groups) {
    absl::StrAppend(&out, "\n", group.title, ":\n");
    for (const std::string& name : group.flags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) {
        absl::StrAppend(&out, "  --", name, "  (not in this build)\n");
        continue;
      }
      const std::string default_value = flag->DefaultValue();
      absl::StrAppend(&out, "  --", name, " (default: ",
                      default_value.empty() ? "\"\"" : default_value, ")\n");
      AppendWrapped(flag->Help(), 6, 80, &out);
    }
  }
  absl::StrAppend(&out, "\n  --version  version, git revision, backends\n",
                  "  --helpfull  every flag in the process, Abseil's and "
                  "gRPC's included\n");
  return out;
}

std::string FormatVersion(const ProgramHelp& help) {
  std::string out = absl::StrCat(help.program, " ", MoeserveVersion(), " (git ",
                                 GitRevision(), ", ", BuildMode(), " build)\n");
  if (help.version_details) {
    for (const std::string& line : help.version_details()) {
      absl::StrAppend(&out, line, "\n");
    }
  }
  return out;
}

std::vector<std::string> UngroupedFlags(const ProgramHelp& help,
                                        const std::string& file_substring) {
  std::set<std::string> grouped;
  for (const FlagGroup& group : help.groups) {
    grouped.insert(group.flags.begin(), group.flags.end());
  }
  std::vector<std::string> missing;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find(file_substring) != std::string::npos &&
        !grouped.count(std::string(name))) {
      missing.emplace_back(name);
    }
  }
  std::sort(missing.begin(), missing.end());
  return missing;
}

std::optional<int> HandleHelpAndVersion(int argc, char** argv,
                                        const ProgramHelp& help) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;  // what follows is not ours
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::fputs(FormatHelp(help).c_str(), stdout);
      return 0;
    }
    if (arg == "--version" || arg == "-version") {
      std::fputs(FormatVersion(help).c_str(), stdout);
      return 0;
    }
  }
  return std::nullopt;
}

}  // namespace moeserve::base
