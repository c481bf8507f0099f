#!/bin/bash
# Bazel's --workspace_status_command (.bazelrc): the git revision that
# //base:build_info stamps into every binary's --version. STABLE_ keys rerun
# the stamping genrule when they change (one small compile and the relinks),
# so an incremental build never reports a stale revision. Outside a git
# checkout (a source tarball) the revision is "unknown".
rev="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if [ "$rev" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  rev="${rev}-dirty"
fi
echo "STABLE_MOESERVE_GIT_REVISION ${rev}"
