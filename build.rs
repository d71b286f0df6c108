//! Records which commit the binary was built from, so every results folder
//! names the code that measured it (CI compares results across commits).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
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
