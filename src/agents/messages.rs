//! The agent turn ([`crate::agents::turn`]) on a Messages body: the
//! [`TurnBody`] edits are [`MessagesBody`]'s; the rules stay the turn's.

use crate::agents::turn::{Offered, TurnBody};
use crate::error::Error;
use crate::wire::messages::turn_body::MessagesBody;

/// The names of the tools a Messages body offers, in order.
pub struct OfferedNames(pub Vec<String>);

impl Offered for OfferedNames {
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

impl TurnBody for MessagesBody {
    type Offered = OfferedNames;

    fn check(&self) -> Result<OfferedNames, Error> {
        MessagesBody::check(self).map(OfferedNames)
    }

    fn keep_tools(&mut self, keep: &[&str]) {
        MessagesBody::keep_tools(self, keep)
    }

    fn answered_calls(&self) -> Vec<String> {
        MessagesBody::answered_calls(self)
    }

    fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        MessagesBody::answer_calls(self, fate)
    }

    fn put_instructions(&mut self, instructions: &str) {
        MessagesBody::put_instructions(self, instructions)
    }

    fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) -> Result<(), Error> {
        MessagesBody::protect(self, scan);
        Ok(())
    }

    fn put_note(&mut self, note: &str, at: usize) -> Result<(), Error> {
        MessagesBody::put_note(self, note, at);
        Ok(())
    }

    fn is_stream(&self) -> bool {
        MessagesBody::is_stream(self)
    }
}
