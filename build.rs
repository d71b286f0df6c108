//! Records which commit the binary was built from, so every results folder
//! names the code that measured it (CI compares results across commits),
//! and compiles every profile in profiles/ into the binary, so a new one is
//! bundled by being there.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `$OUT_DIR/bundled.rs`: `(name, text)` of every profiles/*.toml, by name.
fn bundle_profiles() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("profiles/ is readable")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".toml")?.to_string())
        })
        .collect();
    names.sort();
    let rows: String = names
        .iter()
        .map(|n| {
            format!(
                "    ({n:?}, include_str!({:?})),\n",
                dir.join(format!("{n}.toml"))
            )
        })
        .collect();
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("bundled.rs");
    std::fs::write(out, format!("&[\n{rows}]\n")).expect("OUT_DIR is writable");
}

fn main() {
    bundle_profiles();
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let dirty = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) => !s.is_empty(),
        None => false,
    };
    println!("cargo:rustc-env=JSBENCH_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=JSBENCH_GIT_DIRTY={dirty}");
    // Re-run when the sources or the checked-out commit change; the listed
    // directories are scanned recursively by cargo.
    for path in [
        "src",
        "profiles",
        "benches",
        "Cargo.toml",
        "build.rs",
        ".git/HEAD",
        ".git/index",
        ".git/refs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
