#include "tests/matrix/pairwise.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <tuple>

namespace moeserve::testing {
namespace {

// (axis a, value of a, axis b, value of b) with a < b.
using Pair = std::tuple<int, int, int, int>;

class PairCover {
 public:
  explicit PairCover(const std::vector<int>& sizes) {
    const int n = static_cast<int>(sizes.size());
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        for (int va = 0; va < sizes[a]; ++va) {
          for (int vb = 0; vb < sizes[b]; ++vb)
            uncovered_.insert({a, va, b, vb});
        }
      }
    }
  }

  bool done() const { return uncovered_.empty(); }
  const Pair& first() const { return *uncovered_.begin(); }

  // How many uncovered pairs setting axis `axis` to `value` in `row` would
  // cover with the axes already set there (value -1: unset).
  int Gain(const std::vector<int>& row, int axis, int value) const {
    int gain = 0;
    for (int other = 0; other < static_cast<int>(row.size()); ++other) {
      if (other == axis || row[other] < 0) continue;
      const Pair p = other < axis ? Pair{other, row[other], axis, value}
                                  : Pair{axis, value, other, row[other]};
      gain += uncovered_.contains(p) ? 1 : 0;
    }
    return gain;
  }

  void Cover(const std::vector<int>& row) {
    for (int a = 0; a < static_cast<int>(row.size()); ++a) {
      for (int b = a + 1; b < static_cast<int>(row.size()); ++b) {
        uncovered_.erase({a, row[a], b, row[b]});
      }
    }
  }

 private:
  std::set<Pair> uncovered_;
};

// Sets every unset axis of `row`, in axis order, to the value of most gain
// (the lowest such value on a tie, so the result is deterministic).
void FillGreedily(const std::vector<int>& sizes, const PairCover& cover,
                  std::vector<int>* row) {
  for (int axis = 0; axis < static_cast<int>(sizes.size()); ++axis) {
    if ((*row)[axis] >= 0) continue;
    int best = 0;
    int best_gain = -1;
    for (int v = 0; v < sizes[axis]; ++v) {
      const int gain = cover.Gain(*row, axis, v);
      if (gain > best_gain) {
        best = v;
        best_gain = gain;
      }
    }
    (*row)[axis] = best;
  }
}

}  // namespace

std::vector<std::vector<int>> PairwiseRows(const std::vector<int>& sizes,
                                           const std::vector<int>& full) {
  std::vector<std::vector<int>> rows;
  if (sizes.empty() ||
      std::any_of(sizes.begin(), sizes.end(), [](int s) { return s < 1; })) {
    return rows;
  }
  PairCover cover(sizes);
  // Every combination of the full axes, in odometer order (last full axis
  // fastest).
  std::vector<int> counter(full.size(), 0);
  while (true) {
    std::vector<int> row(sizes.size(), -1);
    for (size_t i = 0; i < full.size(); ++i) row[full[i]] = counter[i];
    FillGreedily(sizes, cover, &row);
    cover.Cover(row);
    rows.push_back(std::move(row));
    int i = static_cast<int>(full.size()) - 1;
    while (i >= 0 && ++counter[i] == sizes[full[i]]) counter[i--] = 0;
    if (i < 0) break;
  }
  // Then a row for the first uncovered pair until none is left; each new
  // row covers at least that pair, so this ends.
  while (!cover.done()) {
    const auto [a, va, b, vb] = cover.first();
    std::vector<int> row(sizes.size(), -1);
    row[a] = va;
    row[b] = vb;
    FillGreedily(sizes, cover, &row);
    cover.Cover(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace moeserve::testing
