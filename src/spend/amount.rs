//! Amounts of money as whole nano-units (10⁻⁹ of the currency) in 64-bit
//! integers, and the one currency the gateway prices in. No floating point:
//! a decimal string is read digit by digit and written back the same way
//! (contract, "Spend in money": amounts).

use std::fmt;

/// Nano-units in one unit of the currency.
pub const NANOS_PER_UNIT: u64 = 1_000_000_000;

/// At most this many fractional digits are accepted (one nano-unit).
const FRACTION_DIGITS: usize = 9;

/// An amount of money, in nano-units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(pub u64);

/// Why a value is not an amount (the caller names the field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmountError {
    /// A JSON number (or anything but a string).
    NotAString,
    /// Not `^[0-9]+(\.[0-9]{1,9})?$`.
    BadForm,
    /// More than fits in 64 bits of nano-units.
    TooLarge,
}

impl AmountError {
    /// The end of a sentence that starts with the field's name.
    pub fn says(self) -> &'static str {
        match self {
            AmountError::NotAString => {
                "must be an amount written as a string, e.g. \"0.15\" (a JSON number is not accepted)"
            }
            AmountError::BadForm => {
                "must be an amount like \"12\" or \"0.000000001\": digits, optionally a point and 1 to 9 digits, no sign or exponent"
            }
            AmountError::TooLarge => "is too large",
        }
    }
}

impl Amount {
    pub const ZERO: Amount = Amount(0);

    /// Whole units (`Amount::units(5)` is 5.000000000).
    pub const fn units(n: u64) -> Amount {
        Amount(n * NANOS_PER_UNIT)
    }

    pub fn nanos(self) -> u64 {
        self.0
    }

    /// Reads `^[0-9]+(\.[0-9]{1,9})?$`.
    pub fn parse(s: &str) -> Result<Amount, AmountError> {
        let (whole, frac) = match s.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (s, None),
        };
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) {
            return Err(AmountError::BadForm);
        }
        let mut nanos: u128 = 0;
        for b in whole.bytes() {
            nanos = nanos * 10 + u128::from(b - b'0');
            // Leading zeros keep this small; anything past u64 is refused.
            if nanos > u128::from(u64::MAX) {
                return Err(AmountError::TooLarge);
            }
        }
        nanos *= u128::from(NANOS_PER_UNIT);
        if let Some(f) = frac {
            if !digits(f) || f.len() > FRACTION_DIGITS {
                return Err(AmountError::BadForm);
            }
            let mut part: u128 = 0;
            for b in f.bytes() {
                part = part * 10 + u128::from(b - b'0');
            }
            // "0.5" is 5 followed by 8 zeros of nano-units.
            part *= 10u128.pow((FRACTION_DIGITS - f.len()) as u32);
            nanos += part;
        }
        u64::try_from(nanos)
            .map(Amount)
            .map_err(|_| AmountError::TooLarge)
    }

    /// An amount from JSON: only a string is one.
    pub fn from_json(v: &serde_json::Value) -> Result<Amount, AmountError> {
        match v {
            serde_json::Value::String(s) => Amount::parse(s),
            _ => Err(AmountError::NotAString),
        }
    }
}

impl fmt::Display for Amount {
    /// Always 9 fractional digits: `0.001820000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / NANOS_PER_UNIT,
            self.0 % NANOS_PER_UNIT
        )
    }
}

/// The OpenAPI schema of an amount.
pub fn schema() -> serde_json::Value {
    serde_json::json!({"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,9})?$",
        "description": "An amount of the currency: a decimal string, at most 9 fractional digits (written with exactly 9)."})
}

/// A signed sum of nano-units (totals from the database) as an amount string.
pub fn format_nanos(n: i64) -> String {
    nanos_text(n).as_str().to_owned()
}

/// [`format_nanos`] on the stack (a sign, 10 whole digits, the point and 9:
/// `i64::MIN` is the longest), for the headers of every priced or budgeted
/// answer.
pub fn nanos_text(n: i64) -> crate::text::StackText<24> {
    // `itoa` rather than `format!`: `format!` cost several times the rest
    // of the arithmetic.
    let a = n.unsigned_abs();
    let mut t = crate::text::StackText::default();
    if n < 0 {
        t.push(b"-");
    }
    t.push_int(a / NANOS_PER_UNIT);
    t.push(b".");
    let mut digits = itoa::Buffer::new();
    let frac = digits.format(a % NANOS_PER_UNIT);
    t.repeat(b'0', 9 - frac.len());
    t.push(frac.as_bytes());
    t
}

impl serde::Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The currency every price and budget is in (`GATEHOUSE_CURRENCY`): three
/// upper-case letters A-Z. Nothing is converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    pub const USD: Currency = Currency(*b"USD");

    pub fn parse(s: &str) -> Option<Currency> {
        let b: [u8; 3] = s.as_bytes().try_into().ok()?;
        b.iter().all(u8::is_ascii_uppercase).then_some(Currency(b))
    }

    pub fn as_str(&self) -> &str {
        // Three ASCII letters, checked when made.
        std::str::from_utf8(&self.0).unwrap_or("USD")
    }

    /// `GATEHOUSE_CURRENCY`, default USD; an empty value counts as unset,
    /// as for the other settings.
    pub fn from_env() -> Result<Currency, String> {
        match std::env::var("GATEHOUSE_CURRENCY") {
            Err(std::env::VarError::NotPresent) => Ok(Currency::USD),
            Ok(v) if v.trim().is_empty() => Ok(Currency::USD),
            Ok(v) => Currency::parse(&v).ok_or_else(|| {
                format!(
                    "GATEHOUSE_CURRENCY must be three upper-case letters A-Z such as USD or EUR, not {v:?}"
                )
            }),
            Err(std::env::VarError::NotUnicode(_)) => Err(
                "GATEHOUSE_CURRENCY must be three upper-case letters A-Z such as USD or EUR".into(),
            ),
        }
    }
}

impl Default for Currency {
    fn default() -> Self {
        Currency::USD
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_read_whole_and_fractional_digits_into_nanos() {
        assert_eq!(Amount::parse("0"), Ok(Amount(0)));
        assert_eq!(Amount::parse("1"), Ok(Amount(1_000_000_000)));
        assert_eq!(Amount::parse("1.5"), Ok(Amount(1_500_000_000)));
        assert_eq!(Amount::parse("0.000000001"), Ok(Amount(1)));
        assert_eq!(Amount::parse("0.10"), Ok(Amount(100_000_000)));
        assert_eq!(Amount::parse("007.000000000"), Ok(Amount(7_000_000_000)));
        assert_eq!(
            Amount::parse("1000000.000000001"),
            Ok(Amount(1_000_000_000_000_001))
        );
    }

    #[test]
    fn nine_fractional_digits_are_accepted_and_ten_refused() {
        assert_eq!(Amount::parse("0.123456789"), Ok(Amount(123_456_789)));
        assert_eq!(Amount::parse("0.1234567891"), Err(AmountError::BadForm));
        assert_eq!(Amount::parse("0.0000000000"), Err(AmountError::BadForm));
    }

    #[test]
    fn other_forms_are_refused() {
        for s in [
            "", ".", "1.", ".5", "-1", "+1", "1e3", "1E3", " 1", "1 ", "0x10", "1,5", "1.2.3",
            "NaN", "inf", "١",
        ] {
            assert_eq!(Amount::parse(s), Err(AmountError::BadForm), "{s:?}");
        }
    }

    #[test]
    fn the_largest_amount_in_64_bits_is_read_and_one_nano_more_refused() {
        // u64::MAX nanos = 18446744073.709551615 units.
        assert_eq!(Amount::parse("18446744073.709551615"), Ok(Amount(u64::MAX)));
        assert_eq!(
            Amount::parse("18446744073.709551616"),
            Err(AmountError::TooLarge)
        );
        assert_eq!(
            Amount::parse("99999999999999999999999999"),
            Err(AmountError::TooLarge)
        );
    }

    #[test]
    fn only_json_strings_are_amounts() {
        assert_eq!(Amount::from_json(&json!("2.00")), Ok(Amount(2_000_000_000)));
        for v in [json!(2), json!(2.0), json!(null), json!(true), json!(["1"])] {
            assert_eq!(Amount::from_json(&v), Err(AmountError::NotAString), "{v}");
        }
    }

    #[test]
    fn amounts_are_written_with_exactly_nine_fractional_digits() {
        assert_eq!(Amount(0).to_string(), "0.000000000");
        assert_eq!(Amount(1).to_string(), "0.000000001");
        assert_eq!(Amount(1_820_000).to_string(), "0.001820000");
        assert_eq!(Amount::units(1_000_000).to_string(), "1000000.000000000");
        assert_eq!(Amount(u64::MAX).to_string(), "18446744073.709551615");
        assert_eq!(format_nanos(-1), "-0.000000001");
        assert_eq!(format_nanos(i64::MAX), "9223372036.854775807");
        assert_eq!(format_nanos(i64::MIN), "-9223372036.854775808");
        assert_eq!(
            serde_json::to_string(&Amount(1_500_000_000)).unwrap(),
            "\"1.500000000\""
        );
    }

    #[test]
    fn written_amounts_read_back_the_same() {
        for n in [0, 1, 999_999_999, 1_000_000_000, 123_456_789_012, u64::MAX] {
            assert_eq!(Amount::parse(&Amount(n).to_string()), Ok(Amount(n)));
        }
    }

    #[test]
    fn a_currency_is_three_upper_case_letters() {
        assert_eq!(
            Currency::parse("EUR").map(|c| c.to_string()),
            Some("EUR".into())
        );
        for s in ["usd", "US", "USDT", "U1D", "ÄBC", "", "US "] {
            assert_eq!(Currency::parse(s), None, "{s:?}");
        }
        assert_eq!(Currency::default().as_str(), "USD");
    }
}
