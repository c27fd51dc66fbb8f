//! `flowfs cache`: statistics of a cache directory, objects read into it ahead of the
//! tasks of a node (and the indexes of archives), and its removal. The work is flowfs-fs's (`admin`, `Warmer`); this
//! is the command line around it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use flowfs_archive::{archive_named, ArchiveClient};
use flowfs_fs::admin::{self, CacheStats};
use flowfs_fs::units::human;
use flowfs_fs::Warmer;

use crate::cli::{parse_object, CacheCommand, PrefetchArgs, Store};
use crate::mount::{check_endpoint, fs_config};

pub fn cache(cmd: CacheCommand) -> Result<()> {
    match cmd {
        CacheCommand::Stats(a) => stats(&a.dir, a.json),
        CacheCommand::Prefetch(a) => prefetch(&a),
        CacheCommand::Clear(a) => {
            let n = admin::clear(&a.dir, a.force)?;
            println!(
                "removed {} of cached data from {}",
                human(n),
                a.dir.display()
            );
            Ok(())
        }
    }
}

fn stats(dir: &Path, json: bool) -> Result<()> {
    let st = admin::stats(dir)?;
    let ratio = hit_ratio(&st);
    if json {
        let buckets: BTreeMap<_, _> = (st.buckets.iter())
            .map(|(b, s)| {
                (
                    b,
                    serde_json::json!({"objects": s.objects, "bytes": s.bytes}),
                )
            })
            .collect();
        let v = serde_json::json!({
            "dir": dir.display().to_string(),
            "in_use": st.in_use,
            "objects": st.objects,
            "bytes": st.bytes,
            "hit_bytes": st.hit_bytes,
            "fetched_bytes": st.fetched_bytes,
            "hit_ratio": ratio,
            "buckets": buckets,
        });
        println!("{v}");
        return Ok(());
    }
    println!("cache dir   {}", dir.display());
    let using = if st.in_use { "yes" } else { "no" };
    println!("in use      {using}");
    println!("objects     {}", st.objects);
    println!("size        {} ({} bytes)", human(st.bytes), st.bytes);
    match ratio {
        Some(r) => println!(
            "hit ratio   {:.1}% ({} read from the cache, {} fetched)",
            r * 100.0,
            human(st.hit_bytes),
            human(st.fetched_bytes)
        ),
        None => println!("hit ratio   - (nothing read yet)"),
    }
    for (b, s) in &st.buckets {
        println!("bucket {b}: {} objects, {}", s.objects, human(s.bytes));
    }
    Ok(())
}

/// Bytes read from the cache file out of those and the bytes fetched.
fn hit_ratio(st: &CacheStats) -> Option<f64> {
    let total = st.hit_bytes + st.fetched_bytes;
    (total > 0).then(|| st.hit_bytes as f64 / total as f64)
}

/// A progress bar for the object at `url` (bytes, rate, ETA) when stderr is a terminal;
/// none in a pipe or a log.
fn progress_bar(url: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let style = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .ok()?
    .progress_chars("=> ");
    let bar = indicatif::ProgressBar::new(0).with_style(style);
    bar.set_message(url.to_string());
    Some(bar)
}

fn prefetch(args: &PrefetchArgs) -> Result<()> {
    // What it creates in the cache is its user's alone, as a mount's.
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    check_endpoint(&args.opts)?;
    // Objects grouped by store, in the order of their cache names.
    let mut by_store: BTreeMap<String, (Store, Vec<String>)> = BTreeMap::new();
    for o in &args.objects {
        let (store, k) = parse_object(o).map_err(|e| anyhow!(e))?;
        let name = crate::stores::cache_name(&store, &args.opts)?;
        by_store
            .entry(name)
            .or_insert((store, Vec::new()))
            .1
            .push(k);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("flowfs-io")
        .enable_all()
        .build()?;
    for (name, (store, keys)) in by_store {
        let cfg = fs_config(&args.opts, &name, "")?;
        let client = crate::stores::connect(&rt, &args.opts, &cfg, &store)?;
        let w = Warmer::new(&cfg, client.clone()).context("cannot open the cache")?;
        let r = rt.block_on(async {
            for k in &keys {
                let url = format!("{}/{k}", store.url());
                let archive = archive_named(k);
                if archive {
                    let ident = format!("{name}/{k}");
                    let a = ArchiveClient::open(client.clone(), k, &ident, &cfg.cache_dir)
                        .await
                        .with_context(|| format!("archive {url}"))?;
                    println!("{url}: index of {} members", a.index().members.len());
                }
                if !(archive && args.index_only) {
                    let bar = progress_bar(&url);
                    let mut tell = |done: u64, size: u64| {
                        if let Some(b) = &bar {
                            b.set_length(size);
                            b.set_position(done);
                        }
                    };
                    let n = w.object_progress(k, &mut tell).await;
                    if let Some(b) = bar {
                        b.finish_and_clear();
                    }
                    let n = n.with_context(|| url.clone())?;
                    println!("{url}: {} cached", human(n));
                }
            }
            anyhow::Ok(())
        });
        w.close();
        r?;
    }
    Ok(())
}
