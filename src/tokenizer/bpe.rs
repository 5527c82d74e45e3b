//! Merging one pre-tokenized word.

use super::{byte_to_char, err, Tokenizer};
use crate::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NONE: usize = usize::MAX;

impl Tokenizer {
    /// Appends the ids of a byte-level `word`: its bytes as byte tokens, then merges by
    /// rank.
    pub(super) fn encode_word(&self, word: &str, out: &mut Vec<u32>) -> Result<()> {
        if let Some(whole) = &self.whole {
            let text: String = word.bytes().map(|b| byte_to_char()[b as usize]).collect();
            if let Some(&id) = whole.get(&text) {
                out.push(id);
                return Ok(());
            }
        }
        let mut id = Vec::with_capacity(word.len());
        for b in word.bytes() {
            match self.byte_ids[b as usize].or(self.special.unk) {
                Some(t) => id.push(t),
                None => {
                    return Err(err(format!(
                        "byte {b:#04x} has no token and there is no unk token"
                    )))
                }
            }
        }
        merge_by_rank(self, id, out);
        Ok(())
    }
}

/// Merges `id` by `tok`'s merge ranks (lowest first) and appends the result to `out`.
pub(super) fn merge_by_rank(tok: &Tokenizer, id: Vec<u32>, out: &mut Vec<u32>) {
    merge(id, out, |a, b| tok.ranks.get(&(a, b)).copied());
}

/// Applies merges to the symbols `id` and appends what is left to `out`: always the
/// candidate pair with the smallest key, the leftmost occurrence first, as `tokenizers`
/// does. `candidate(a, b)` gives a pair's key and merged id, or `None` if it does not
/// merge. A heap of candidate pairs over a linked list of symbols keeps this
/// O(n log n): a word can be as long as the text, and the text may come from a client.
pub(super) fn merge<K: Ord + Copy>(
    mut id: Vec<u32>,
    out: &mut Vec<u32>,
    mut candidate: impl FnMut(u32, u32) -> Option<(K, u32)>,
) {
    let n = id.len();
    let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    // (key, left position, left id, right id, merged id); an entry is stale once either
    // symbol has changed, and ids only ever grow into longer tokens, so a match means
    // current.
    let mut heap = BinaryHeap::new();
    let mut push = |heap: &mut BinaryHeap<_>, i: usize, a: u32, b: u32| {
        if let Some((key, merged)) = candidate(a, b) {
            heap.push(Reverse((key, i, a, b, merged)));
        }
    };
    for i in 1..n {
        push(&mut heap, i - 1, id[i - 1], id[i]);
    }
    while let Some(Reverse((_, i, a, b, merged))) = heap.pop() {
        let j = next[i];
        if !alive[i] || j == NONE || id[i] != a || id[j] != b {
            continue;
        }
        id[i] = merged;
        alive[j] = false;
        next[i] = next[j];
        if next[j] != NONE {
            prev[next[j]] = i;
            push(&mut heap, i, id[i], id[next[i]]);
        }
        if prev[i] != NONE {
            push(&mut heap, prev[i], id[prev[i]], id[i]);
        }
    }
    out.extend((0..n).filter(|&i| alive[i]).map(|i| id[i]));
}
