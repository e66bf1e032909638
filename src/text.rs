//! Short texts written on the stack: header values made on every answer
//! (amounts, resets) are copied once into the header's own buffer, where a
//! `String` handed to it cost a second allocation (its capacity is larger
//! than its text, so `Bytes` keeps it behind a shared box).

/// At most `N` bytes of ASCII text.
pub struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> StackText<N> {
    /// Appends `b`; the callers size `N` for their longest text, so a text
    /// that does not fit is a bug, cut rather than a panic on a request.
    pub fn push(&mut self, b: &[u8]) {
        let n = b.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    /// Appends `n` copies of `byte`.
    pub fn repeat(&mut self, byte: u8, n: usize) {
        let n = n.min(N - self.len);
        self.buf[self.len..self.len + n].fill(byte);
        self.len += n;
    }

    /// Appends a number's digits.
    pub fn push_int(&mut self, n: impl itoa::Integer) {
        self.push(itoa::Buffer::new().format(n).as_bytes());
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The text; its writers push ASCII only.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_past_its_room_is_cut_at_the_room() {
        let mut t = StackText::<4>::default();
        t.push(b"ab");
        t.push_int(345u32);
        assert_eq!(t.as_str(), "ab34");
        t.repeat(b'0', 3);
        assert_eq!(t.as_str(), "ab34");
    }
}
