//! `ws gzip` and `ws gunzip`: gzip files (RFC 1952) that the system's gzip reads, and the system's
//! (several members included) that these read. The input file is kept.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::failure::Failure;
use crate::output::stdout_error;

/// `gzip`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws gzip big.log                  (writes big.log.gz, keeps big.log)
  ws gzip -c page.html > page.html.gz
  tar cf - dir | ws gzip > dir.tar.gz

Exit codes: 0 ok, 1 failed (output exists without -f, write error), 2 usage (unreadable input),
130 interrupted.")]
pub struct GzipArgs {
    /// The file to compress into FILE.gz; `-` or none: stdin to stdout.
    pub file: Option<PathBuf>,
    /// Write to stdout instead of FILE.gz.
    #[arg(short = 'c', long = "stdout")]
    pub stdout: bool,
    /// Overwrite FILE.gz if it exists.
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Compress the input this many times in memory first and print the time per run (a
    /// benchmark, as in IXWebSocket), then write the result once.
    #[arg(long = "run_count", default_value_t = 1, value_parser = crate::opts::positive::<u32>)]
    pub run_count: u32,
}

/// `gunzip`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws gunzip big.log.gz             (writes big.log, keeps big.log.gz)
  ws gunzip -c page.html.gz | head
  curl -s https://example.com/x.gz | ws gunzip > x

Exit codes: 0 ok, 1 failed (not gzip data, output exists without -f, write error), 2 usage
(unreadable input, a name without .gz and no -c), 130 interrupted.")]
pub struct GunzipArgs {
    /// The .gz file to decompress into FILE; `-` or none: stdin to stdout.
    pub file: Option<PathBuf>,
    /// Write to stdout instead of FILE.
    #[arg(short = 'c', long = "stdout")]
    pub stdout: bool,
    /// Overwrite FILE if it exists.
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Compress,
    Decompress,
}

/// Runs `ws gzip`.
pub(crate) async fn gzip(args: GzipArgs) -> Result<(), Failure> {
    if args.run_count > 1 {
        benchmark(args.file.as_deref(), args.run_count)?;
    }
    run(Direction::Compress, args.file, args.stdout, args.force).await
}

/// `--run_count N`: N compressions of the file in memory, timed.
fn benchmark(file: Option<&std::path::Path>, runs: u32) -> Result<(), Failure> {
    let Some(path) = file.filter(|p| p.as_os_str() != "-") else {
        return Err(Failure::usage(
            "--run_count needs a file (stdin can be read only once)",
        ));
    };
    let data = std::fs::read(path).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    let started = std::time::Instant::now();
    let mut size = 0;
    for _ in 0..runs {
        if crate::interrupt::is_requested() {
            return Err(Failure::interrupted());
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let compressed = gz
            .write_all(&data)
            .and_then(|()| gz.finish())
            .map_err(|e| Failure::new(format!("cannot compress: {e}")))?;
        size = compressed.len();
    }
    let each = started.elapsed().as_secs_f64() / f64::from(runs);
    crate::output::errln!(
        "{}: {} -> {size} bytes, {runs} runs, {:.3} ms per run ({:.1} MB/s)",
        path.display(),
        data.len(),
        each * 1e3,
        data.len() as f64 / each.max(1e-9) / 1e6
    );
    Ok(())
}

/// Runs `ws gunzip`.
pub(crate) async fn gunzip(args: GunzipArgs) -> Result<(), Failure> {
    run(Direction::Decompress, args.file, args.stdout, args.force).await
}

/// Where the bytes go.
#[derive(Debug)]
enum Out {
    Stdout,
    File(BufWriter<File>, PathBuf),
}

impl Out {
    fn error(&self, e: std::io::Error) -> Failure {
        match self {
            Out::Stdout => stdout_error(e),
            Out::File(_, path) => Failure::new(format!("cannot write {}: {e}", path.display())),
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::Stdout => std::io::stdout().lock().write(buf),
            Out::File(file, _) => file.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stdout => std::io::stdout().lock().flush(),
            Out::File(file, _) => file.flush(),
        }
    }
}

async fn run(
    direction: Direction,
    file: Option<PathBuf>,
    to_stdout: bool,
    force: bool,
) -> Result<(), Failure> {
    let file = file.filter(|f| f.as_os_str() != "-");
    let (input, input_name): (Box<dyn Read + Send>, String) = match &file {
        None => (Box::new(std::io::stdin()), "stdin".into()),
        Some(path) => {
            let opened = File::open(path).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            if opened.metadata().is_ok_and(|m| m.is_dir()) {
                return Err(Failure::usage(format!("{}: is a directory", path.display())));
            }
            (Box::new(opened), path.display().to_string())
        }
    };
    let target = match &file {
        Some(path) if !to_stdout => Some(output_path(direction, path)?),
        _ => None,
    };
    let out = match &target {
        None => Out::Stdout,
        Some(path) => {
            let mut options = std::fs::OpenOptions::new();
            options.write(true);
            if force {
                options.create(true).truncate(true);
            } else {
                options.create_new(true);
            }
            let created = options.open(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Failure::new(format!(
                        "{} already exists: use -f to overwrite it",
                        path.display()
                    ))
                } else {
                    Failure::new(format!("cannot write {}: {e}", path.display()))
                }
            })?;
            Out::File(BufWriter::new(created), path.clone())
        }
    };
    let header_name = match (&file, direction) {
        (Some(path), Direction::Compress) => path.file_name().map(|n| n.to_string_lossy().into_owned()),
        _ => None,
    };
    let mtime = match &file {
        Some(path) => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u32::try_from(d.as_secs()).ok())
            .unwrap_or(0),
        None => 0,
    };
    let work = tokio::task::spawn_blocking(move || match direction {
        Direction::Compress => compress(input, &input_name, out, header_name, mtime),
        Direction::Decompress => decompress(input, &input_name, out),
    });
    let result = match crate::interrupt::unless_interrupted(work).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => Err(Failure::new(format!("the worker failed: {e}"))),
        Err(interrupted) => Err(interrupted),
    };
    if result.is_err()
        && let Some(path) = &target
    {
        let _ = std::fs::remove_file(path); // no half-written output left behind
    }
    result
}

/// FILE.gz for gzip, FILE for gunzip (which needs the .gz suffix to find the name).
fn output_path(direction: Direction, path: &Path) -> Result<PathBuf, Failure> {
    let name = path.as_os_str().to_string_lossy();
    let has_suffix = name.len() > 3 && name.to_ascii_lowercase().ends_with(".gz");
    match direction {
        Direction::Compress if has_suffix => Err(Failure::usage(format!(
            "{name} already ends in .gz; use -c to compress it again"
        ))),
        Direction::Compress => {
            let mut out = path.as_os_str().to_owned();
            out.push(".gz");
            Ok(PathBuf::from(out))
        }
        Direction::Decompress if has_suffix => Ok(PathBuf::from(&name[..name.len() - 3])),
        Direction::Decompress => Err(Failure::usage(format!(
            "{name} does not end in .gz, so the output has no name; use -c (stdout)"
        ))),
    }
}

const CHUNK: usize = 64 * 1024;

/// Why a copy stopped early.
#[derive(Debug)]
enum Stopped {
    Read(std::io::Error),
    Write(std::io::Error),
    Interrupted,
}

/// Copies `from` into `to` chunk by chunk, stopping when Ctrl-C is pressed.
fn pump(mut from: impl Read, mut to: impl Write) -> Result<(), Stopped> {
    let mut buf = vec![0; CHUNK];
    loop {
        if crate::interrupt::is_requested() {
            return Err(Stopped::Interrupted);
        }
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stopped::Read(e)),
        };
        to.write_all(&buf[..n]).map_err(Stopped::Write)?;
    }
}

fn compress(
    input: Box<dyn Read + Send>,
    input_name: &str,
    out: Out,
    name: Option<String>,
    mtime: u32,
) -> Result<(), Failure> {
    let mut builder = flate2::GzBuilder::new().mtime(mtime);
    if let Some(name) = name {
        builder = builder.filename(name);
    }
    let mut encoder = builder.write(out, flate2::Compression::default());
    match pump(input, &mut encoder) {
        Ok(()) => {}
        Err(Stopped::Read(e)) => return Err(Failure::new(format!("cannot read {input_name}: {e}"))),
        Err(Stopped::Write(e)) => return Err(encoder.get_ref().error(e)),
        Err(Stopped::Interrupted) => return Err(Failure::interrupted()),
    }
    let mut out = match encoder.try_finish() {
        Ok(()) => encoder.finish().map_err(|e| Failure::new(e.to_string()))?,
        Err(e) => return Err(encoder.get_ref().error(e)),
    };
    out.flush().map_err(|e| out.error(e))
}

fn decompress(input: Box<dyn Read + Send>, input_name: &str, mut out: Out) -> Result<(), Failure> {
    let decoder = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(CHUNK, input));
    match pump(decoder, &mut out) {
        Ok(()) => out.flush().map_err(|e| out.error(e)),
        Err(Stopped::Read(e)) => Err(match e.kind() {
            std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::InvalidData
            | std::io::ErrorKind::UnexpectedEof => {
                Failure::new(format!("{input_name}: not gzip data, or damaged: {e}"))
            }
            _ => Failure::new(format!("cannot read {input_name}: {e}")),
        }),
        Err(Stopped::Write(e)) => Err(out.error(e)),
        Err(Stopped::Interrupted) => Err(Failure::interrupted()),
    }
}
