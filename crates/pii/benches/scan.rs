//! Scanner throughput on ~1 MB of realistic chat text.
//!
//! Run: CARGO_TARGET_DIR=/work/target-pii cargo bench -p gatehouse-pii --bench scan -- --warm-up-time 1 --measurement-time 3

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gatehouse_pii::{redact, Counts, Scanner, StreamRestorer, Vault};
use rand::{rngs::StdRng, Rng, SeedableRng};

const PROSE: &[&str] = &[
    "Thanks for the quick reply, that makes a lot more sense now.",
    "Could you summarize the main points of the article in three bullet points?",
    "The quarterly report shows revenue grew by 12% compared to last year.",
    "I think the problem is that the cache is invalidated too often under load.",
    "Let me know if you want me to rewrite the introduction in a friendlier tone.",
    "Our team meets every Tuesday at 10:30 to review open pull requests.",
    "The new pricing starts at $49 per month, or $499 per year when billed annually.",
    "In 2023 we moved the whole stack to Kubernetes and cut costs by about a third.",
    "Please upgrade to version 2.14.1 before running the migration script.",
    "Here is a draft of the email to the customer explaining the delay.",
    "The hotel costs €1,250.00 for the week, breakfast included.",
    "She was born in 1987 and moved to Berlin after finishing her degree.",
    "Can you explain the difference between a process and a thread in simple terms?",
    "The deadline was moved to 2024-11-15 because the vendor shipped late.",
    "Results: accuracy 93.4%, precision 0.91, recall 0.88 on 12,000 samples.",
    "We need about 250 GB of storage and 16 GB of RAM for the staging cluster.",
    "The function returns None when the key is missing, so handle that case first.",
    "I'd recommend reading chapter 7 before the workshop on Thursday.",
    "Write a haiku about autumn leaves falling on a quiet river.",
    "The build failed on commit 4f2a9c1 with error code 137, probably out of memory.",
    "Translate the following paragraph into French, keeping the formal register.",
    "Order #88213 was delivered on March 3rd, two days after the estimate.",
    "What are the trade-offs between PostgreSQL and SQLite for a small app?",
    "The API rate limit is 600 requests per minute per key.",
];

const CODE: &[&str] = &[
    "```rust\nfn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!(\"{:?}\", v);\n}\n```",
    "```python\nimport numpy as np\nx = np.linspace(0, 1, 100)\nprint(x.mean(), x.std())\n```",
    "use std::collections::HashMap; let mut m: HashMap<String, usize> = HashMap::new();",
    "`std::io::Result<()>` is returned by `File::open`, see std::fs::File for details.",
    "{\"model\": \"gpt-4o\", \"temperature\": 0.2, \"max_tokens\": 512, \"stream\": true}",
    "SELECT id, name, created_at FROM users WHERE created_at > '2024-01-01' LIMIT 50;",
    "docker run -p 8080:80 -e RUST_LOG=info ghcr.io/example/app:1.4.2",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // O(n)",
];

const PII: &[&str] = &[
    "You can reach me at maria.gonzalez@example.com if anything comes up.",
    "My number is (555) 123-4567, call after 6pm.",
    "Please forward it to j.smith@corp.example.org and copy the team lead.",
    "Call the office on 020 7946 0958 or my mobile +44 7700 900123.",
];

fn corpus(target: usize) -> String {
    let mut rng = StdRng::seed_from_u64(42);
    let mut text = String::with_capacity(target + 1024);
    let mut next_pii = 0usize;
    while text.len() < target {
        let r = rng.gen_range(0..100);
        let s = if r < 80 {
            PROSE[rng.gen_range(0..PROSE.len())]
        } else {
            CODE[rng.gen_range(0..CODE.len())]
        };
        text.push_str(s);
        text.push(if rng.gen_range(0..6) == 0 { '\n' } else { ' ' });
        // About six findings per 100 kB.
        if text.len() / 16_000 > next_pii {
            next_pii += 1;
            text.push_str(PII[next_pii % PII.len()]);
            text.push(' ');
        }
    }
    text
}

fn terms() -> Vec<String> {
    [
        "Acme",
        "Globex Corporation",
        "Initech",
        "Umbrella",
        "Hooli",
        "Project Falcon",
        "Wayne Enterprises",
        "Stark Industries",
        "Cyberdyne",
        "Soylent",
        "Tyrell",
        "Wonka",
        "Vandelay Industries",
        "Pied Piper",
        "Massive Dynamic",
        "Oscorp",
        "Nakatomi",
        "Blue Sun",
        "Aperture Science",
        "Black Mesa",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn bench(c: &mut Criterion) {
    let text = corpus(1 << 20);
    let default = Scanner::new(&[]).expect("default scanner");
    let with_terms = Scanner::new(&terms()).expect("term scanner");
    let findings = default.scan(&text).len();
    eprintln!(
        "corpus: {} bytes, {findings} findings (default scanner)",
        text.len()
    );

    let mut g = c.benchmark_group("pii");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);

    g.bench_function("scan_default", |b| {
        b.iter(|| black_box(default.scan(black_box(&text))))
    });
    g.bench_function("scan_20_terms", |b| {
        b.iter(|| black_box(with_terms.scan(black_box(&text))))
    });
    g.bench_function("redact_default", |b| {
        b.iter(|| {
            let mut counts = Counts::default();
            black_box(redact(&default, black_box(&text), &mut counts))
        })
    });
    g.bench_function("tokenize_default", |b| {
        let mut vault = Vault::new();
        b.iter(|| {
            let mut counts = Counts::default();
            black_box(vault.tokenize(&default, black_box(&text), &mut counts))
        })
    });

    // Stream restore of a tokenized answer in small SSE-sized deltas.
    let mut vault = Vault::new();
    let tokenized = vault.tokenize(&default, &text, &mut Counts::default());
    let vault = Arc::new(vault);
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut rng = StdRng::seed_from_u64(7);
    while at < tokenized.len() {
        let mut next = (at + rng.gen_range(2..24)).min(tokenized.len());
        while !tokenized.is_char_boundary(next) {
            next += 1;
        }
        chunks.push(&tokenized[at..next]);
        at = next;
    }
    g.throughput(Throughput::Bytes(tokenized.len() as u64));
    g.bench_function("stream_restore", |b| {
        b.iter(|| {
            let mut r = StreamRestorer::new(vault.clone(), false);
            let mut n = 0usize;
            for chunk in &chunks {
                n += r.push(chunk).len();
            }
            n += r.finish().len();
            black_box(n)
        })
    });
    g.bench_function("restore", |b| {
        b.iter(|| black_box(vault.restore(black_box(&tokenized))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
