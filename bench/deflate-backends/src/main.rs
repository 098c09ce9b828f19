//! Compress/inflate throughput of the selected flate2 backend on WebSocket-shaped work: 20,000 JSON
//! messages of about 1 KiB, each sync-flushed (RFC 7692 §7.2.1) with context takeover, and the
//! bytes a connection's compressor and decompressor allocate.

use std::time::Instant;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn messages() -> Vec<Vec<u8>> {
    let mut seed = 0x2545F491u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    (0..20_000)
        .map(|i| {
            let mut s = String::from("[");
            while s.len() < 1000 {
                s.push_str(&format!(
                    r#"{{"id":{i},"user":"user{}","price":{}.{:02},"side":"{}","ts":{}}},"#,
                    next() % 5000,
                    next() % 100000,
                    next() % 100,
                    if next() % 2 == 0 { "buy" } else { "sell" },
                    1_700_000_000_000u64 + u64::from(next() % 1_000_000)
                ));
            }
            s.push(']');
            s.into_bytes()
        })
        .collect()
}

fn main() {
    let backend = if cfg!(feature = "zlib-rs") { "zlib-rs" } else if cfg!(feature = "zlib") { "zlib (system)" } else { "miniz_oxide" };
    let msgs = messages();
    let total: usize = msgs.iter().map(Vec::len).sum();
    for level in [1u32, 6] {
        let before = counting::live();
        let mut c = Compress::new(Compression::new(level), false);
        let mut d = Decompress::new(false);
        let mut compressed = Vec::with_capacity(msgs.len());
        let t = Instant::now();
        for m in &msgs {
            let mut out = Vec::with_capacity(m.len() + 64);
            let start = c.total_in();
            while (c.total_in() - start) < m.len() as u64 || out.len() < 4 || !out.ends_with(&[0, 0, 0xff, 0xff]) {
                let consumed = (c.total_in() - start) as usize;
                out.reserve(256);
                c.compress_vec(&m[consumed..], &mut out, FlushCompress::Sync).unwrap();
            }
            out.truncate(out.len() - 4);
            compressed.push(out);
        }
        let ct = t.elapsed().as_secs_f64();
        let mem_after_compress = counting::live() - before - compressed.iter().map(|v| v.capacity()).sum::<usize>();
        let t = Instant::now();
        let mut out = Vec::with_capacity(4096);
        for (m, z) in msgs.iter().zip(&compressed) {
            out.clear();
            let mut input = z.clone();
            input.extend_from_slice(&[0, 0, 0xff, 0xff]);
            let start = d.total_in();
            while ((d.total_in() - start) as usize) < input.len() {
                let consumed = (d.total_in() - start) as usize;
                out.reserve(4096);
                d.decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync).unwrap();
            }
            assert_eq!(&out, m);
        }
        let dt = t.elapsed().as_secs_f64();
        let zsize: usize = compressed.iter().map(Vec::len).sum();
        println!(
            "{backend:14} level {level}: compress {:7.1} MB/s, inflate {:7.1} MB/s, ratio {:.3}, compressor+decompressor state ~{} KiB",
            total as f64 / ct / 1e6,
            total as f64 / dt / 1e6,
            zsize as f64 / total as f64,
            mem_after_compress / 1024,
        );
    }
}
