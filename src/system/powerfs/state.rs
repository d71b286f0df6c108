//! What the power-loss filesystem holds: the backing directory is the
//! disk, and each file's writes since its last fsync live only here, in
//! memory, as a disk's volatile cache would hold them. Metadata (create,
//! mkdir, rename, unlink, truncate) reaches the backing directory at once:
//! the layer models lost data, not lost directory entries (docs/durability.md).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The root directory's inode number, fixed by FUSE.
pub const ROOT: u64 = 1;

/// One write not yet synced: bytes at an offset.
#[derive(Debug)]
struct Extent {
    offset: u64,
    data: Vec<u8>,
}

impl Extent {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// A file or directory the kernel has looked up.
#[derive(Debug)]
pub struct Node {
    /// Relative to the backing root; empty for the root.
    path: PathBuf,
    pub is_dir: bool,
    /// The backing file, held open from the first open on, so an unlinked
    /// but open file can still be read and synced, as on a real disk.
    file: Option<File>,
    /// The size readers see: the backing size with unsynced writes on top.
    size: u64,
    /// Unsynced writes, in the order they came; later ones win on reads.
    dirty: Vec<Extent>,
    /// Removed from its directory: no longer reachable by path.
    unlinked: bool,
}

impl Node {
    fn unsynced_bytes(&self) -> u64 {
        self.dirty.iter().map(|e| e.data.len() as u64).sum()
    }
}

/// What a power cut dropped: writes that never reached an fsync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Bytes written but never synced (overlapping rewrites count each time).
    pub unsynced_bytes: u64,
    /// The files that had them, relative to the mount, sorted, each with
    /// its own unsynced bytes: a test can then tell a file's in-flight tail
    /// from a file that was never synced.
    pub unsynced_files: Vec<(PathBuf, u64)>,
}

/// Every node the kernel knows, by inode and by path.
#[derive(Debug)]
pub struct State {
    backing: PathBuf,
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    next_ino: u64,
    /// The power is off: every request fails from now on.
    pub dead: bool,
}

fn enoent() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

impl State {
    pub fn new(backing: &Path) -> State {
        let mut state = State {
            backing: backing.to_path_buf(),
            nodes: HashMap::new(),
            by_path: HashMap::new(),
            next_ino: ROOT,
            dead: false,
        };
        // The first node added: the root, the backing directory itself.
        state.add(PathBuf::new(), true, 0, None);
        state
    }

    pub fn backing(&self) -> &Path {
        &self.backing
    }

    pub fn node(&self, ino: u64) -> io::Result<&Node> {
        self.nodes.get(&ino).ok_or_else(enoent)
    }

    fn node_mut(&mut self, ino: u64) -> io::Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or_else(enoent)
    }

    /// Where a node's bytes live on the backing directory.
    pub fn real_path(&self, ino: u64) -> io::Result<PathBuf> {
        Ok(self.backing.join(&self.node(ino)?.path))
    }

    fn child_path(&self, parent: u64, name: &Path) -> io::Result<PathBuf> {
        let parent = self.node(parent)?;
        if !parent.is_dir {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(parent.path.join(name))
    }

    /// The inode of `name` in `parent`, known or newly numbered from the
    /// backing directory; ENOENT when the backing has no such entry.
    pub fn lookup(&mut self, parent: u64, name: &Path) -> io::Result<u64> {
        let path = self.child_path(parent, name)?;
        if let Some(&ino) = self.by_path.get(&path) {
            return Ok(ino);
        }
        let meta = fs::symlink_metadata(self.backing.join(&path))?;
        Ok(self.add(path, meta.is_dir(), meta.len(), None))
    }

    fn add(&mut self, path: PathBuf, is_dir: bool, size: u64, file: Option<File>) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_path.insert(path.clone(), ino);
        let node = Node {
            path,
            is_dir,
            file,
            size,
            dirty: Vec::new(),
            unlinked: false,
        };
        self.nodes.insert(ino, node);
        ino
    }

    /// Metadata of the backing entry, with the size readers see.
    pub fn metadata(&self, ino: u64) -> io::Result<(fs::Metadata, u64)> {
        let node = self.node(ino)?;
        let meta = match &node.file {
            Some(file) => file.metadata()?,
            None => fs::symlink_metadata(self.backing.join(&node.path))?,
        };
        let size = if node.is_dir { meta.len() } else { node.size };
        Ok((meta, size))
    }

    /// Opens the backing file for reading and writing, once per node.
    pub fn open(&mut self, ino: u64) -> io::Result<()> {
        let real = self.real_path(ino)?;
        let node = self.node_mut(ino)?;
        if node.is_dir {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        if node.file.is_none() {
            node.file = Some(OpenOptions::new().read(true).write(true).open(real)?);
        }
        Ok(())
    }

    /// Creates a file in the backing directory (the entry is durable at
    /// once, its data is not) and opens it.
    pub fn create(&mut self, parent: u64, name: &Path, mode: u32, excl: bool) -> io::Result<u64> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.child_path(parent, name)?;
        let real = self.backing.join(&path);
        let mut options = OpenOptions::new();
        options.read(true).write(true).mode(mode);
        if excl {
            options.create_new(true);
        } else {
            options.create(true);
        }
        let file = options.open(real)?;
        if let Some(&ino) = self.by_path.get(&path) {
            let node = self.node_mut(ino)?;
            node.file.get_or_insert(file);
            return Ok(ino);
        }
        let size = file.metadata()?.len();
        Ok(self.add(path, false, size, Some(file)))
    }

    pub fn mkdir(&mut self, parent: u64, name: &Path, mode: u32) -> io::Result<u64> {
        use std::os::unix::fs::DirBuilderExt;
        let path = self.child_path(parent, name)?;
        fs::DirBuilder::new()
            .mode(mode)
            .create(self.backing.join(&path))?;
        Ok(self.add(path, true, 0, None))
    }

    /// Reads what a reader of the file sees: the backing bytes, zeros up
    /// to the logical size, and the unsynced writes on top, oldest first.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let node = self.node(ino)?;
        let file = node
            .file
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let end = node.size.min(offset.saturating_add(u64::from(size)));
        if end <= offset {
            return Ok(Vec::new());
        }
        let mut buf = vec![0; (end - offset) as usize];
        let mut done = 0;
        while done < buf.len() {
            let n = file.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        for extent in &node.dirty {
            let from = extent.offset.max(offset);
            let to = extent.end().min(end);
            if from < to {
                let src =
                    &extent.data[(from - extent.offset) as usize..(to - extent.offset) as usize];
                buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
            }
        }
        Ok(buf)
    }

    /// Keeps a write in memory; `append` puts it at the logical end, as
    /// O_APPEND does whatever offset the kernel sent.
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8], append: bool) -> io::Result<u64> {
        let node = self.node_mut(ino)?;
        if node.file.is_none() {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let offset = if append { node.size } else { offset };
        match node.dirty.last_mut() {
            // Appends grow one extent instead of piling up small ones.
            Some(last) if last.end() == offset => last.data.extend_from_slice(data),
            _ => node.dirty.push(Extent {
                offset,
                data: data.to_vec(),
            }),
        }
        node.size = node.size.max(offset + data.len() as u64);
        Ok(offset)
    }

    /// Sets the size on the backing file at once (a size change is
    /// metadata) and cuts unsynced writes beyond it.
    pub fn truncate(&mut self, ino: u64, size: u64) -> io::Result<()> {
        let real = self.real_path(ino)?;
        let node = self.node_mut(ino)?;
        match &node.file {
            Some(file) => file.set_len(size)?,
            None => OpenOptions::new().write(true).open(real)?.set_len(size)?,
        }
        node.dirty.retain_mut(|e| {
            if e.end() > size {
                e.data.truncate(size.saturating_sub(e.offset) as usize);
            }
            !e.data.is_empty()
        });
        node.size = size;
        Ok(())
    }

    /// fsync: the file's unsynced writes go to the backing file, in order.
    /// Returns the bytes written. The backing file itself is not fsynced:
    /// the host's power does not go, only this layer's.
    pub fn sync(&mut self, ino: u64) -> io::Result<u64> {
        let node = self.node_mut(ino)?;
        let Some(file) = &node.file else {
            return Ok(0);
        };
        let mut bytes = 0;
        for extent in &node.dirty {
            file.write_all_at(&extent.data, extent.offset)?;
            bytes += extent.data.len() as u64;
        }
        node.dirty.clear();
        Ok(bytes)
    }

    /// Bytes written and not yet synced, across all reachable files.
    pub fn pending(&self) -> u64 {
        let live = self.nodes.values().filter(|n| !n.unlinked);
        live.map(Node::unsynced_bytes).sum()
    }

    /// Syncs every file (a clean unmount); returns the bytes written.
    pub fn sync_all(&mut self) -> io::Result<u64> {
        let inos: Vec<u64> = self.nodes.keys().copied().collect();
        inos.into_iter().map(|ino| self.sync(ino)).sum()
    }

    /// The power goes: everything unsynced is dropped and counted, and
    /// every request from now on fails.
    pub fn cut(&mut self) -> CutReport {
        self.dead = true;
        let mut report = CutReport::default();
        for node in self.nodes.values_mut() {
            let bytes = node.unsynced_bytes();
            if bytes > 0 && !node.unlinked {
                report.unsynced_bytes += bytes;
                report.unsynced_files.push((node.path.clone(), bytes));
            }
            node.dirty.clear();
            node.file = None;
        }
        report.unsynced_files.sort();
        report
    }

    pub fn unlink(&mut self, parent: u64, name: &Path, dir: bool) -> io::Result<()> {
        let path = self.child_path(parent, name)?;
        let real = self.backing.join(&path);
        if dir {
            fs::remove_dir(real)?;
        } else {
            fs::remove_file(real)?;
        }
        self.forget_path(&path);
        Ok(())
    }

    /// An entry gone from its directory: its node lives on for open handles.
    fn forget_path(&mut self, path: &Path) {
        if let Some(ino) = self.by_path.remove(path)
            && let Some(node) = self.nodes.get_mut(&ino)
        {
            node.unlinked = true;
        }
    }

    /// Renames in the backing directory at once; unsynced writes follow
    /// their inode, and a replaced target is unlinked.
    pub fn rename(&mut self, from: (u64, &Path), to: (u64, &Path)) -> io::Result<()> {
        let old = self.child_path(from.0, from.1)?;
        let new = self.child_path(to.0, to.1)?;
        fs::rename(self.backing.join(&old), self.backing.join(&new))?;
        if old == new {
            return Ok(());
        }
        self.forget_path(&new);
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(&old))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (path, ino) in moved {
            let renamed = match path.strip_prefix(&old) {
                Ok(rest) if !rest.as_os_str().is_empty() => new.join(rest),
                _ => new.clone(),
            };
            self.by_path.remove(&path);
            self.by_path.insert(renamed.clone(), ino);
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = renamed;
            }
        }
        Ok(())
    }

    /// A directory's entries from the backing directory, numbered, with
    /// whether each is a directory.
    pub fn list(&mut self, ino: u64) -> io::Result<Vec<(u64, bool, std::ffi::OsString)>> {
        let real = self.real_path(ino)?;
        let mut names: Vec<_> = fs::read_dir(real)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let child = self.lookup(ino, Path::new(&name))?;
            out.push((child, self.node(child)?.is_dir, name));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (tempfile::TempDir, State, u64) {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(dir.path());
        let ino = state.create(ROOT, Path::new("f"), 0o644, true).unwrap();
        (dir, state, ino)
    }

    #[test]
    fn later_writes_win_and_a_truncate_cuts_unsynced_bytes() {
        let (_dir, mut s, ino) = state();
        s.write(ino, 0, b"aaaa", false).unwrap();
        s.write(ino, 2, b"bb", false).unwrap();
        assert_eq!(s.read(ino, 0, 100).unwrap(), b"aabb");
        s.truncate(ino, 3).unwrap();
        assert_eq!(s.read(ino, 0, 100).unwrap(), b"aab");
        assert_eq!(s.sync(ino).unwrap(), 4, "aaaa cut to aaa, bb cut to b");
        assert_eq!(fs::read(s.real_path(ino).unwrap()).unwrap(), b"aab");
    }

    #[test]
    fn a_renamed_directory_carries_its_files_unsynced_bytes_to_the_new_path() {
        let (dir, mut s, _) = state();
        let d = s.mkdir(ROOT, Path::new("d"), 0o755).unwrap();
        let inner = s.create(d, Path::new("g"), 0o644, true).unwrap();
        s.write(inner, 0, b"kept", false).unwrap();
        s.rename((ROOT, Path::new("d")), (ROOT, Path::new("e")))
            .unwrap();
        assert_eq!(s.lookup(ROOT, Path::new("e")).unwrap(), d);
        let e = s.lookup(ROOT, Path::new("e")).unwrap();
        assert_eq!(s.lookup(e, Path::new("g")).unwrap(), inner);
        assert_eq!(s.sync(inner).unwrap(), 4);
        assert_eq!(fs::read(dir.path().join("e/g")).unwrap(), b"kept");
        assert!(s.lookup(ROOT, Path::new("d")).is_err());
    }

    #[test]
    fn an_append_lands_at_the_logical_end_whatever_the_offset() {
        let (_dir, mut s, ino) = state();
        s.write(ino, 0, b"abc", false).unwrap();
        assert_eq!(s.write(ino, 0, b"de", true).unwrap(), 3);
        assert_eq!(s.read(ino, 1, 3).unwrap(), b"bcd");
        let report = s.cut();
        assert_eq!(report.unsynced_bytes, 5);
        assert_eq!(report.unsynced_files, vec![(PathBuf::from("f"), 5)]);
    }
}
