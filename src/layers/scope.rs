//! Weight names by scope, as candle's `VarBuilder::pp`: a block is given the scope its weights
//! live under and names them relative to it, so no call site spells a full name.

use crate::graph::{GraphBuilder, NodeId};
use crate::Result;
use std::fmt;

/// A weight-name prefix: `Scope::new("vlm").pp("blk").pp(3).pp("attn_q")` is
/// `vlm.blk.3.attn_q`. Dereferences to the name, so it goes wherever a `&str` prefix does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope(String);

impl Scope {
    pub fn new(name: impl Into<String>) -> Self {
        Scope(name.into())
    }

    /// The scope `part` below this one (`self.part`).
    pub fn pp(&self, part: impl fmt::Display) -> Scope {
        Scope(format!("{}.{part}", self.0))
    }

    /// Declares the weight `name` of this scope with its shape ([`GraphBuilder::weight`]).
    pub fn weight(&self, g: &mut GraphBuilder, name: &str, shape: &[usize]) -> Result<NodeId> {
        g.weight(&self.pp(name), shape)
    }
}

impl std::ops::Deref for Scope {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Scope {
    fn from(name: &str) -> Self {
        Scope::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_with_dots() {
        let blk = Scope::new("vlm").pp("blk").pp(3);
        assert_eq!(&*blk.pp("attn_q"), "vlm.blk.3.attn_q");
        assert_eq!(blk.to_string(), "vlm.blk.3");
    }
}
