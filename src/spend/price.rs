//! Prices of (provider, upstream model) pairs: the body of
//! `PUT /api/admin/prices/...` and of `[[prices]]`, checked into rates in
//! nano-units per 1,000,000 tokens; the versions; and the in-memory book
//! the hot path reads (contract, "Spend in money": prices).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::amount::{Amount, AmountError, Currency};
use crate::error::Error;

/// The largest rate or request fee: 1,000,000 units.
pub const MAX_RATE: Amount = Amount::units(1_000_000);
/// The most tiers a price may have.
pub const MAX_TIERS: usize = 8;

/// One set of rates, in nano-units per 1,000,000 tokens. An unset rate is
/// None (and stays so in views); pricing falls back to `input` or `output`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    pub input: Amount,
    pub output: Amount,
    pub cache_read: Option<Amount>,
    pub cache_write: Option<Amount>,
    pub reasoning: Option<Amount>,
}

/// Rates that replace the base rates when the prompt has more than
/// `above_prompt_tokens` tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    pub above_prompt_tokens: u64,
    pub rates: Rates,
}

/// What a price says, whatever its version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriceSpec {
    pub base: Rates,
    /// A flat fee per request that got an upstream answer.
    pub request: Option<Amount>,
    /// Ordered by strictly increasing `above_prompt_tokens`.
    pub tiers: Vec<Tier>,
}

const RATE_FIELDS: [&str; 5] = ["input", "output", "cache_read", "cache_write", "reasoning"];

fn amount_field(
    obj: &Map<String, Value>,
    name: &str,
    param: &str,
) -> Result<Option<Amount>, Error> {
    let Some(v) = obj.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let a = Amount::from_json(v).map_err(|e| {
        let says = match e {
            AmountError::TooLarge => "must be at most 1000000",
            e => e.says(),
        };
        Error::validation(param, format!("'{param}' {says}."))
    })?;
    if a > MAX_RATE {
        return Err(Error::validation(
            param,
            format!("'{param}' must be at most 1000000 (it was {a})."),
        ));
    }
    Ok(Some(a))
}

fn rates(obj: &Map<String, Value>, prefix: &str) -> Result<Rates, Error> {
    let param = |name: &str| format!("{prefix}{name}");
    let required = |name: &str| -> Result<Amount, Error> {
        amount_field(obj, name, &param(name))?.ok_or_else(|| {
            Error::validation(param(name), format!("'{}' is required.", param(name)))
        })
    };
    Ok(Rates {
        input: required("input")?,
        output: required("output")?,
        cache_read: amount_field(obj, "cache_read", &param("cache_read"))?,
        cache_write: amount_field(obj, "cache_write", &param("cache_write"))?,
        reasoning: amount_field(obj, "reasoning", &param("reasoning"))?,
    })
}

fn unknown_fields(obj: &Map<String, Value>, known: &[&str], prefix: &str) -> Result<(), Error> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(Error::validation(
            format!("{prefix}{k}"),
            format!("'{prefix}{k}' is not a field of a price."),
        )),
        None => Ok(()),
    }
}

impl PriceSpec {
    /// Reads and checks a price body (the PUT body, or a `[[prices]]` table
    /// without `provider` and `upstream_model`). Each error names its field.
    pub fn from_json(body: &Value) -> Result<PriceSpec, Error> {
        let Some(obj) = body.as_object() else {
            return Err(Error::validation("body", "The body must be a JSON object."));
        };
        let mut known = RATE_FIELDS.to_vec();
        known.extend(["request", "tiers"]);
        unknown_fields(obj, &known, "")?;
        let base = rates(obj, "")?;
        let request = amount_field(obj, "request", "request")?;
        let tiers = match obj.get("tiers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                if list.len() > MAX_TIERS {
                    return Err(Error::validation(
                        "tiers",
                        format!(
                            "'tiers' may have at most {MAX_TIERS} entries (it has {}).",
                            list.len()
                        ),
                    ));
                }
                let mut tiers: Vec<Tier> = Vec::with_capacity(list.len());
                for (i, t) in list.iter().enumerate() {
                    let prefix = format!("tiers[{i}].");
                    let Some(t) = t.as_object() else {
                        return Err(Error::validation(
                            format!("tiers[{i}]"),
                            format!("'tiers[{i}]' must be an object."),
                        ));
                    };
                    let mut known = RATE_FIELDS.to_vec();
                    known.push("above_prompt_tokens");
                    unknown_fields(t, &known, &prefix)?;
                    let p = format!("{prefix}above_prompt_tokens");
                    let above = match t.get("above_prompt_tokens").and_then(Value::as_u64) {
                        Some(n) if n >= 1 && n <= i64::MAX as u64 => n,
                        _ => {
                            return Err(Error::validation(
                                p.clone(),
                                format!("'{p}' must be a whole number of at least 1."),
                            ))
                        }
                    };
                    if let Some(prev) = tiers.last() {
                        if above <= prev.above_prompt_tokens {
                            return Err(Error::validation(
                                p.clone(),
                                format!(
                                    "'{p}' must be greater than the previous tier's ({}): tiers go in increasing order.",
                                    prev.above_prompt_tokens
                                ),
                            ));
                        }
                    }
                    tiers.push(Tier {
                        above_prompt_tokens: above,
                        rates: rates(t, &prefix)?,
                    });
                }
                tiers
            }
            Some(_) => {
                return Err(Error::validation(
                    "tiers",
                    "'tiers' must be a list of {above_prompt_tokens, input, output, ...}.",
                ))
            }
        };
        Ok(PriceSpec {
            base,
            request,
            tiers,
        })
    }

    /// The rates for a request with `prompt` tokens: the tier with the
    /// largest `above_prompt_tokens` below it, else the base rates.
    pub fn rates_for(&self, prompt: u64) -> &Rates {
        self.tiers
            .iter()
            .rev()
            .find(|t| t.above_prompt_tokens < prompt)
            .map_or(&self.base, |t| &t.rates)
    }

    /// The spec as stored: tiers as JSON with amounts in nano-units.
    pub fn tiers_json(&self) -> String {
        let list: Vec<Value> = self
            .tiers
            .iter()
            .map(|t| {
                json!({"above": t.above_prompt_tokens, "input": t.rates.input.0,
                       "output": t.rates.output.0, "cache_read": t.rates.cache_read.map(|a| a.0),
                       "cache_write": t.rates.cache_write.map(|a| a.0),
                       "reasoning": t.rates.reasoning.map(|a| a.0)})
            })
            .collect();
        Value::Array(list).to_string()
    }

    /// Reads back what [`PriceSpec::tiers_json`] wrote.
    pub fn tiers_from_json(text: &str) -> Vec<Tier> {
        let list: Vec<Value> = serde_json::from_str(text).unwrap_or_default();
        let nanos = |t: &Value, k: &str| t.get(k).and_then(Value::as_u64).map(Amount);
        list.iter()
            .filter_map(|t| {
                Some(Tier {
                    above_prompt_tokens: t.get("above")?.as_u64()?,
                    rates: Rates {
                        input: nanos(t, "input")?,
                        output: nanos(t, "output")?,
                        cache_read: nanos(t, "cache_read"),
                        cache_write: nanos(t, "cache_write"),
                        reasoning: nanos(t, "reasoning"),
                    },
                })
            })
            .collect()
    }
}

/// One version of a pair's price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Price {
    /// Opaque, distinct for every version; shared with every cost it
    /// prices (a request's record holds it without a copy).
    pub version: std::sync::Arc<str>,
    pub provider: String,
    pub upstream_model: String,
    pub spec: PriceSpec,
    /// Unix ms.
    pub effective_from: i64,
    /// None while current.
    pub effective_to: Option<i64>,
}

fn rates_json(r: &Rates) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("input".into(), json!(r.input));
    m.insert("output".into(), json!(r.output));
    m.insert("cache_read".into(), json!(r.cache_read));
    m.insert("cache_write".into(), json!(r.cache_write));
    m.insert("reasoning".into(), json!(r.reasoning));
    m
}

impl Price {
    /// The contract's price object.
    pub fn view(&self, currency: Currency) -> Value {
        let mut m = Map::new();
        m.insert("version".into(), json!(&*self.version));
        m.insert("provider".into(), json!(self.provider));
        m.insert("upstream_model".into(), json!(self.upstream_model));
        m.insert("currency".into(), json!(currency.as_str()));
        m.extend(rates_json(&self.spec.base));
        m.insert("request".into(), json!(self.spec.request));
        let tiers: Vec<Value> = self
            .spec
            .tiers
            .iter()
            .map(|t| {
                let mut o = Map::new();
                o.insert("above_prompt_tokens".into(), json!(t.above_prompt_tokens));
                o.extend(rates_json(&t.rates));
                Value::Object(o)
            })
            .collect();
        m.insert("tiers".into(), Value::Array(tiers));
        m.insert(
            "effective_from".into(),
            json!(crate::time::rfc3339(self.effective_from)),
        );
        m.insert(
            "effective_to".into(),
            json!(self.effective_to.map(crate::time::rfc3339)),
        );
        Value::Object(m)
    }
}

fn rates_schema(required: &[&str], extra: Value) -> Value {
    let amount = super::amount::schema();
    let or_null = |v: &Value| json!({"anyOf": [v, {"type": "null"}]});
    let mut props = json!({"input": amount, "output": amount, "cache_read": or_null(&amount),
        "cache_write": or_null(&amount), "reasoning": or_null(&amount)});
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({"type": "object", "required": required, "properties": props})
}

/// The OpenAPI schema of a PUT body.
pub fn body_schema() -> Value {
    let amount = super::amount::schema();
    let tier = rates_schema(
        &["above_prompt_tokens", "input", "output"],
        json!({"above_prompt_tokens": {"type": "integer", "minimum": 1}}),
    );
    rates_schema(
        &["input", "output"],
        json!({"request": {"anyOf": [amount, {"type": "null"}]},
               "tiers": {"type": "array", "maxItems": MAX_TIERS, "items": tier}}),
    )
}

/// The OpenAPI schema of a price object.
pub fn schema() -> Value {
    let amount = super::amount::schema();
    let tier = rates_schema(
        &[
            "above_prompt_tokens",
            "input",
            "output",
            "cache_read",
            "cache_write",
            "reasoning",
        ],
        json!({"above_prompt_tokens": {"type": "integer", "minimum": 1}}),
    );
    let time = json!({"type": "string", "format": "date-time"});
    rates_schema(
        &[
            "version",
            "provider",
            "upstream_model",
            "currency",
            "input",
            "output",
            "cache_read",
            "cache_write",
            "reasoning",
            "request",
            "tiers",
            "effective_from",
            "effective_to",
        ],
        json!({"version": {"type": "string"}, "provider": {"type": "string"},
               "upstream_model": {"type": "string"}, "currency": {"type": "string"},
               "request": {"anyOf": [amount, {"type": "null"}]},
               "tiers": {"type": "array", "items": tier},
               "effective_from": time, "effective_to": {"anyOf": [time, {"type": "null"}]}}),
    )
}

/// The current prices, by provider and upstream model: what the hot path
/// reads (two hash lookups, no database).
#[derive(Debug, Default)]
pub struct PriceBook {
    by_provider: HashMap<String, Pairs, Fold>,
}

/// The book's keys are the admins' names, not a client's: a fast hash
/// (read two or three times a priced request) instead of SipHash.
type Fold = foldhash::fast::RandomState;
type Pairs = HashMap<String, Arc<Price>, Fold>;

impl PriceBook {
    pub fn new(current: Vec<Price>) -> PriceBook {
        let mut by_provider: HashMap<String, Pairs, Fold> = HashMap::default();
        for p in current {
            by_provider
                .entry(p.provider.clone())
                .or_default()
                .insert(p.upstream_model.clone(), Arc::new(p));
        }
        PriceBook { by_provider }
    }

    pub fn get(&self, provider: &str, upstream_model: &str) -> Option<&Arc<Price>> {
        self.by_provider.get(provider)?.get(upstream_model)
    }

    pub fn is_empty(&self) -> bool {
        self.by_provider.is_empty()
    }
}

/// The price book every request snapshots when it starts, and the currency.
/// Replaced whole when prices change (here or on another server).
#[derive(Debug)]
pub struct Prices {
    /// The book, and the number of the reload that read it.
    book: parking_lot::RwLock<(u64, Arc<PriceBook>)>,
    pub currency: Currency,
}

impl Prices {
    pub fn new(currency: Currency) -> Prices {
        Prices {
            book: parking_lot::RwLock::new((0, Arc::new(PriceBook::default()))),
            currency,
        }
    }

    pub fn book(&self) -> Arc<PriceBook> {
        Arc::clone(&self.book.read().1)
    }

    /// Puts in the book read by reload `n`, unless a later reload's is in
    /// already (a read made before a change never replaces one made after).
    pub fn replace_if_newer(&self, n: u64, book: PriceBook) {
        let mut b = self.book.write();
        if n > b.0 {
            *b = (n, Arc::new(book));
        }
    }
}

/// A `[[prices]]` table of `GATEHOUSE_CONFIG` (as JSON): its pair and its
/// price, read as PUT reads a body. Errors are PUT's, the field named.
pub fn file_price(entry: &Value) -> Result<(String, String, PriceSpec), Error> {
    let Some(obj) = entry.as_object() else {
        return Err(Error::validation(
            "prices",
            "Each [[prices]] entry must be a table.",
        ));
    };
    let text = |k: &str| -> Result<String, Error> {
        match obj.get(k).and_then(Value::as_str).map(str::trim) {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(Error::validation(
                k,
                format!("'{k}' is required (a string)."),
            )),
        }
    };
    let provider = text("provider")?;
    let upstream_model = text("upstream_model")?;
    let mut body = obj.clone();
    body.remove("provider");
    body.remove("upstream_model");
    let spec = PriceSpec::from_json(&Value::Object(body))?;
    Ok((provider, upstream_model, spec))
}

/// How a `[[prices]]` problem is named: `price PROVIDER/UPSTREAM_MODEL`.
pub fn file_price_label(entry: &Value, i: usize) -> String {
    let get = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    if entry.get("provider").is_none() && entry.get("upstream_model").is_none() {
        return format!("price #{}", i + 1);
    }
    format!("price {}/{}", get("provider"), get("upstream_model"))
}

/// Longest accepted provider name or upstream model in a price's path.
pub const MAX_NAME_CHARS: usize = 256;

/// Checks a pair named in a path (not empty, not too long).
pub fn check_pair(provider: &str, upstream_model: &str) -> Result<(), Error> {
    for (what, v) in [("provider", provider), ("upstream_model", upstream_model)] {
        if v.is_empty() || v.chars().count() > MAX_NAME_CHARS {
            return Err(Error::validation(
                what,
                format!("'{what}' must be 1 to {MAX_NAME_CHARS} characters."),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: Value) -> Option<String> {
        PriceSpec::from_json(&body).err().and_then(|e| e.param)
    }

    #[test]
    fn a_price_needs_input_and_output() {
        assert_eq!(param(json!({"output": "1"})), Some("input".into()));
        assert_eq!(param(json!({"input": "1"})), Some("output".into()));
        let spec = PriceSpec::from_json(&json!({"input": "1.00", "output": "2"})).unwrap();
        assert_eq!(spec.base.input, Amount::units(1));
        assert_eq!(spec.base.cache_read, None);
        assert_eq!(spec.request, None);
    }

    #[test]
    fn rates_go_up_to_a_million_and_not_a_nano_past() {
        for f in [
            "input",
            "output",
            "cache_read",
            "cache_write",
            "reasoning",
            "request",
        ] {
            let mut body = json!({"input": "1", "output": "1"});
            body[f] = json!("1000000");
            assert!(PriceSpec::from_json(&body).is_ok(), "{f}");
            body[f] = json!("1000000.000000001");
            assert_eq!(param(body.clone()), Some(f.to_string()));
            let e = PriceSpec::from_json(&body).unwrap_err();
            assert!(e.message.contains(f), "{}", e.message);
            body[f] = json!(1);
            assert_eq!(param(body), Some(f.to_string()), "a number for {f}");
        }
        assert_eq!(param(json!({"input": "0", "output": "0"})), None);
        assert_eq!(
            param(json!({"input": "-1", "output": "0"})),
            Some("input".into())
        );
        assert_eq!(
            param(json!({"input": "0.0000000001", "output": "0"})),
            Some("input".into())
        );
    }

    fn tiers(n: usize) -> Value {
        let list: Vec<Value> = (0..n)
            .map(|i| json!({"above_prompt_tokens": 1000 * (i + 1), "input": "1", "output": "2"}))
            .collect();
        json!({"input": "1", "output": "1", "tiers": list})
    }

    #[test]
    fn eight_tiers_are_accepted_and_nine_refused() {
        assert_eq!(PriceSpec::from_json(&tiers(8)).unwrap().tiers.len(), 8);
        assert_eq!(param(tiers(9)), Some("tiers".into()));
    }

    #[test]
    fn tiers_must_rise_strictly_and_name_the_entry() {
        let mut body = tiers(3);
        body["tiers"][1]["above_prompt_tokens"] = json!(1000);
        assert_eq!(
            param(body.clone()),
            Some("tiers[1].above_prompt_tokens".into())
        );
        body["tiers"][1]["above_prompt_tokens"] = json!(1001);
        assert_eq!(param(body.clone()), None);
        body["tiers"][0]["above_prompt_tokens"] = json!(0);
        assert_eq!(
            param(body.clone()),
            Some("tiers[0].above_prompt_tokens".into())
        );
        body["tiers"][0]["above_prompt_tokens"] = json!(1);
        assert_eq!(param(body.clone()), None);
        body["tiers"][0]["above_prompt_tokens"] = json!("5");
        assert_eq!(
            param(body.clone()),
            Some("tiers[0].above_prompt_tokens".into())
        );
        body["tiers"][0]["above_prompt_tokens"] = json!(1.5);
        assert_eq!(
            param(body.clone()),
            Some("tiers[0].above_prompt_tokens".into())
        );
        body["tiers"][0]["above_prompt_tokens"] = json!(1);
        body["tiers"][2].as_object_mut().unwrap().remove("output");
        assert_eq!(param(body.clone()), Some("tiers[2].output".into()));
        body["tiers"][2]["output"] = json!("1000000.1");
        assert_eq!(param(body), Some("tiers[2].output".into()));
    }

    #[test]
    fn unknown_fields_are_named() {
        assert_eq!(
            param(json!({"input": "1", "output": "1", "inptu": "1"})),
            Some("inptu".into())
        );
    }

    #[test]
    fn the_tier_is_the_one_with_the_largest_threshold_below_the_prompt() {
        let spec = PriceSpec::from_json(&tiers(2)).unwrap();
        assert_eq!(spec.rates_for(1000).output, Amount::units(1));
        assert_eq!(spec.rates_for(1001).output, Amount::units(2));
        assert_eq!(spec.rates_for(2000).input, Amount::units(1));
        assert!(std::ptr::eq(spec.rates_for(2001), &spec.tiers[1].rates));
    }

    #[test]
    fn stored_tiers_read_back_equal() {
        let mut body = tiers(2);
        body["tiers"][1]["cache_read"] = json!("0.1");
        let spec = PriceSpec::from_json(&body).unwrap();
        assert_eq!(PriceSpec::tiers_from_json(&spec.tiers_json()), spec.tiers);
    }

    #[test]
    fn a_file_price_names_its_pair_and_is_read_as_a_body() {
        let entry = json!({"provider": "vllm-1", "upstream_model": "meta-llama/L", "input": "1", "output": "2"});
        let (p, m, spec) = file_price(&entry).unwrap();
        assert_eq!((p.as_str(), m.as_str()), ("vllm-1", "meta-llama/L"));
        assert_eq!(spec.base.output, Amount::units(2));
        assert_eq!(file_price_label(&entry, 0), "price vllm-1/meta-llama/L");
        let bad = json!({"provider": "p", "upstream_model": "m", "input": "1", "output": 2});
        assert_eq!(
            file_price(&bad).unwrap_err().param.as_deref(),
            Some("output")
        );
        let no_pair = json!({"input": "1", "output": "2"});
        assert_eq!(
            file_price(&no_pair).unwrap_err().param.as_deref(),
            Some("provider")
        );
        assert_eq!(file_price_label(&no_pair, 2), "price #3");
    }

    #[test]
    fn equal_amounts_written_differently_make_equal_prices() {
        let a = PriceSpec::from_json(&json!({"input": "1.0", "output": "2"})).unwrap();
        let b = PriceSpec::from_json(&json!({"input": "1", "output": "2.000000000"})).unwrap();
        assert_eq!(a, b);
    }
}
