//! Merging one pre-tokenized word.

use super::{err, Tokenizer};
use crate::Result;

impl Tokenizer {
    /// Appends the ids of `word`: its bytes as byte tokens, then, while any adjacent pair
    /// has a merge, every occurrence (left to right) of the lowest-ranked pair merged.
    /// Merging all occurrences of one pair per pass gives what `tokenizers`' priority
    /// queue gives: ranks are unique, so no other pair can come between two occurrences.
    pub(super) fn encode_word(&self, word: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut sym = Vec::with_capacity(word.len());
        for b in word.bytes() {
            match self.byte_ids[b as usize].or(self.special.unk) {
                Some(id) => sym.push(id),
                None => {
                    return Err(err(format!(
                        "byte {b:#04x} has no token and there is no unk token"
                    )))
                }
            }
        }
        let mut next = Vec::with_capacity(sym.len());
        loop {
            let best = sym
                .windows(2)
                .filter_map(|p| {
                    self.ranks
                        .get(&(p[0], p[1]))
                        .map(|&(rank, merged)| (rank, p[0], p[1], merged))
                })
                .min_by_key(|&(rank, ..)| rank);
            let Some((_, a, b, merged)) = best else { break };
            next.clear();
            let mut i = 0;
            while i < sym.len() {
                if i + 1 < sym.len() && sym[i] == a && sym[i + 1] == b {
                    next.push(merged);
                    i += 2;
                } else {
                    next.push(sym[i]);
                    i += 1;
                }
            }
            std::mem::swap(&mut sym, &mut next);
        }
        out.extend_from_slice(&sym);
        Ok(())
    }
}
