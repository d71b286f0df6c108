//! The power-loss filesystem: what it keeps and drops at a power cut,
//! what readers see before one, and that its mount never outlives it.
//! Needs root and /dev/fuse; without them the tests fail with the reason
//! (they never skip: a skip would read as a pass).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use jsbench::system::powerfs::{Mounted, PowerFs};

/// A mount over a backing directory, both in one temporary folder. The
/// mount is declared first so it goes before the folder is removed.
struct Fixture {
    fs: Option<Mounted>,
    backing: PathBuf,
    mnt: PathBuf,
    _tmp: tempfile::TempDir,
}

fn mounted() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    // Canonical, as the kernel's mount table names it.
    let root = tmp.path().canonicalize().unwrap();
    let backing = root.join("backing");
    let mnt = root.join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let fs = PowerFs::mount(&backing, &mnt)
        .unwrap_or_else(|e| panic!("the power-loss layer cannot mount here: {e:#}"));
    Fixture {
        fs: Some(fs),
        backing,
        mnt,
        _tmp: tmp,
    }
}

impl Fixture {
    fn cut(&mut self) -> jsbench::system::powerfs::CutReport {
        self.fs.take().unwrap().cut_power().expect("the power cut")
    }
}

/// Whether anything is mounted at `path` (canonical), from the kernel's
/// own table.
fn is_mounted(path: &Path) -> bool {
    fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(path.to_str().unwrap()))
}

#[test]
fn a_power_cut_loses_the_unsynced_write_and_keeps_the_synced_one() {
    let mut f = mounted();
    let mut a = File::create(f.mnt.join("a")).unwrap();
    a.write_all(b"synced").unwrap();
    a.sync_all().unwrap();
    a.write_all(b"+unsynced").unwrap();
    drop(a); // close(2) is no fsync: the tail stays volatile
    fs::write(f.mnt.join("b"), b"lost").unwrap();

    // Readers see the unsynced bytes; the backing disk does not hold them yet.
    assert_eq!(fs::read(f.mnt.join("a")).unwrap(), b"synced+unsynced");
    assert_eq!(fs::metadata(f.mnt.join("b")).unwrap().len(), 4);
    assert_eq!(fs::read(f.mnt.join("b")).unwrap(), b"lost");
    assert_eq!(fs::read(f.backing.join("a")).unwrap(), b"synced");
    assert_eq!(f.fs.as_ref().unwrap().unsynced_bytes(), 13);

    let report = f.cut();
    assert_eq!(report.unsynced_bytes, 13, "{report:?}");
    assert_eq!(
        report.unsynced_files,
        vec![(PathBuf::from("a"), 9), (PathBuf::from("b"), 4)]
    );
    assert!(!is_mounted(&f.mnt), "the mount is gone after the cut");
    assert_eq!(fs::read(f.backing.join("a")).unwrap(), b"synced");
    // Entries are durable when made (docs/durability.md): b stays, empty.
    assert_eq!(fs::read(f.backing.join("b")).unwrap(), b"");
}

#[test]
fn rename_unlink_truncate_and_append_reach_the_backing_directory_as_documented() {
    let mut f = mounted();
    let dir = f.mnt.join("d");
    fs::create_dir(&dir).unwrap();
    let mut x = File::create(dir.join("x")).unwrap();
    x.write_all(b"hello").unwrap();
    x.sync_all().unwrap();
    drop(x);
    fs::rename(dir.join("x"), dir.join("y")).unwrap();
    let mut y = OpenOptions::new().append(true).open(dir.join("y")).unwrap();
    y.write_all(b" world").unwrap();
    drop(y);
    assert_eq!(fs::read(dir.join("y")).unwrap(), b"hello world");

    fs::write(dir.join("z"), b"gone").unwrap();
    fs::remove_file(dir.join("z")).unwrap();
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["y"]);

    // Unsynced bytes follow the file through a rename and reach the new
    // name on fsync.
    fs::rename(dir.join("y"), f.mnt.join("moved")).unwrap();
    File::open(f.mnt.join("moved")).unwrap().sync_all().unwrap();
    OpenOptions::new()
        .write(true)
        .open(f.mnt.join("moved"))
        .unwrap()
        .set_len(5)
        .unwrap();
    let mut tail = OpenOptions::new()
        .append(true)
        .open(f.mnt.join("moved"))
        .unwrap();
    tail.write_all(b"!").unwrap();
    drop(tail);
    assert_eq!(fs::read(f.mnt.join("moved")).unwrap(), b"hello!");

    let report = f.cut();
    assert_eq!(report.unsynced_bytes, 1, "{report:?}");
    assert_eq!(fs::read(f.backing.join("moved")).unwrap(), b"hello");
    assert!(!f.backing.join("d/x").exists() && !f.backing.join("d/y").exists());
    assert!(!f.backing.join("d/z").exists());
}

#[test]
fn a_cut_with_a_file_still_open_tears_the_mount_down_and_the_holder_sees_errors() {
    let mut f = mounted();
    let mut held = File::create(f.mnt.join("held")).unwrap();
    held.write_all(b"in flight").unwrap();
    let report = f.cut();
    assert_eq!(report.unsynced_bytes, 9);
    assert!(!is_mounted(&f.mnt), "no stale mount after a busy cut");
    let mut buf = Vec::new();
    assert!(held.write_all(b"more").is_err() || held.read_to_end(&mut buf).is_err());
    assert_eq!(fs::read(f.backing.join("held")).unwrap(), b"");
}

#[test]
fn dropping_the_mount_unmounts_it_even_when_a_test_fails_first() {
    let f = mounted();
    let mnt = f.mnt.clone();
    assert!(is_mounted(&mnt));
    // A thread that owns the fixture and panics, as a failing test does.
    let failing = std::thread::spawn(move || {
        let whole = f;
        fs::write(whole.mnt.join("x"), b"1").unwrap();
        panic!("a failing test");
    });
    assert!(failing.join().is_err());
    assert!(!is_mounted(&mnt), "Drop unmounted it");
}

#[test]
fn a_clean_unmount_syncs_everything() {
    let mut f = mounted();
    fs::write(f.mnt.join("kept"), b"all of it").unwrap();
    // A clean unmount: everything synced, then the power cut.
    let mounted = f.fs.take().unwrap();
    mounted.sync_all().unwrap();
    mounted.cut_power().unwrap();
    assert!(!is_mounted(&f.mnt));
    assert_eq!(fs::read(f.backing.join("kept")).unwrap(), b"all of it");
}

#[test]
fn a_mountpoint_that_is_no_directory_is_refused_by_name_and_nothing_is_mounted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let file = root.join("not-a-directory");
    fs::write(&file, b"").unwrap();
    let err = match PowerFs::mount(&root, &file) {
        Ok(_) => panic!("mounting on a regular file succeeded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("is not a directory"), "{err}");
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    assert!(!is_mounted(&file));
}

#[test]
fn a_backing_directory_inside_the_mountpoint_is_refused_rather_than_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    fs::create_dir(root.join("inner")).unwrap();
    let err = match PowerFs::mount(&root.join("inner"), &root) {
        Ok(_) => panic!("a mount over its own backing directory succeeded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("lies inside the mountpoint"), "{err}");
    assert!(!is_mounted(&root));
}
