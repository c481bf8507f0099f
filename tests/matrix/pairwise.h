// PairwiseRows: the rows of a test matrix that cover every pair of values of
// any two axes at least once, instead of every combination of all of them.
//
// The invariance matrices (policy x drafter x model x budget x k, policy x
// model x budget x link x tier) grew to about a thousand cases each, most of
// them repeating a pair of values another case already ran together. Faults
// in this code come from one axis or from two interacting (a policy with a
// budget, a drafter with k); a case for every pair finds those, and the axes
// that must interact in full (every policy with every drafter) are named as
// `full`: every combination of them is a row.
#ifndef MOESERVE_TESTS_MATRIX_PAIRWISE_H_
#define MOESERVE_TESTS_MATRIX_PAIRWISE_H_

#include <vector>

namespace moeserve::testing {

// `sizes[a]`: how many values axis a has (each >= 1). `full`: indices of
// the axes crossed in full. Returns rows of value indices, one per axis,
// deterministic for the same input: first every combination of the full
// axes (the other axes filled greedily, each with the value that covers the
// most pairs not yet covered), then rows added greedily until every pair of
// values of any two axes appears in some row.
std::vector<std::vector<int>> PairwiseRows(const std::vector<int>& sizes,
                                           const std::vector<int>& full = {});

}  // namespace moeserve::testing

#endif  // MOESERVE_TESTS_MATRIX_PAIRWISE_H_
