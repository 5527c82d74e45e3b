//! Merging one pre-tokenized word.

use super::{err, Tokenizer};
use crate::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NONE: usize = usize::MAX;

impl Tokenizer {
    /// Appends the ids of `word`: its bytes as byte tokens, then merges, always the
    /// lowest-ranked pair present and the leftmost occurrence of it first, as
    /// `tokenizers` does. A heap of candidate pairs over a linked list of symbols keeps this
    /// O(n log n): a word can be as long as the text, and the text may come from a client.
    pub(super) fn encode_word(&self, word: &str, out: &mut Vec<u32>) -> Result<()> {
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
        let n = id.len();
        let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        // (rank, left position, left id, right id); an entry is stale once either symbol
        // has changed, and ids only ever grow into longer tokens, so a match means current.
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, i: usize, a: u32, b: u32| {
            if let Some(&(rank, _)) = self.ranks.get(&(a, b)) {
                heap.push(Reverse((rank, i, a, b)));
            }
        };
        for i in 1..n {
            push(&mut heap, i - 1, id[i - 1], id[i]);
        }
        while let Some(Reverse((_, i, a, b))) = heap.pop() {
            let j = next[i];
            if !alive[i] || j == NONE || id[i] != a || id[j] != b {
                continue;
            }
            id[i] = self.ranks[&(a, b)].1;
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
        Ok(())
    }
}
