//! The FUSE face of [`State`]: each kernel request is one call on the
//! state under its lock, and every request after a power cut fails with
//! EIO, as a device that lost its power would answer.

use std::ffi::OsStr;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::state::State;

/// How long the kernel may trust an answer. Short: nothing but this layer
/// changes the tree, but a stale size after a truncate would mislead.
const TTL: Duration = Duration::from_millis(100);

/// The filesystem the kernel talks to; the state is shared with [`super::Mounted`].
pub struct PowerFsOps {
    pub state: Arc<Mutex<State>>,
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn time(seconds: i64, nanos: i64) -> SystemTime {
    let since = Duration::new(seconds.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
    UNIX_EPOCH + since
}

/// The layer holds directories and regular files only.
fn file_type(is_dir: bool) -> FileType {
    if is_dir {
        FileType::Directory
    } else {
        FileType::RegularFile
    }
}

fn attr(ino: u64, meta: &Metadata, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: time(meta.ctime(), meta.ctime_nsec()),
        kind: file_type(meta.is_dir()),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl PowerFsOps {
    /// The state, or EIO once the power is off.
    fn live(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.dead {
            return Err(Errno::EIO);
        }
        Ok(state)
    }

    /// Runs `f` on the live state, mapping I/O errors to their errno.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> io::Result<T>) -> Result<T, Errno> {
        let mut state = self.live()?;
        f(&mut state).map_err(|e| errno(&e))
    }

    fn attr_of(state: &State, ino: u64) -> io::Result<FileAttr> {
        let (meta, size) = state.metadata(ino)?;
        Ok(attr(ino, &meta, size))
    }

    fn entry(&self, reply: ReplyEntry, f: impl FnOnce(&mut State) -> io::Result<u64>) {
        match self.with(|s| f(s).and_then(|ino| Self::attr_of(s, ino))) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn attr(&self, reply: ReplyAttr, f: impl FnOnce(&mut State) -> io::Result<FileAttr>) {
        match self.with(f) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn empty(&self, reply: ReplyEmpty, f: impl FnOnce(&mut State) -> io::Result<()>) {
        match self.with(f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl fuser::Filesystem for PowerFsOps {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, |s| s.lookup(parent.0, Path::new(name)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.attr(reply, |s| Self::attr_of(s, ino.0));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.attr(reply, |s| {
            if let Some(size) = size {
                s.truncate(ino.0, size)?;
            }
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                let perms = std::fs::Permissions::from_mode(mode & 0o7777);
                std::fs::set_permissions(s.real_path(ino.0)?, perms)?;
            }
            Self::attr_of(s, ino.0)
        });
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |s| {
            s.mkdir(parent.0, Path::new(name), mode & !umask & 0o7777)
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.unlink(parent.0, Path::new(name), false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.unlink(parent.0, Path::new(name), true));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_NOREPLACE and RENAME_EXCHANGE are not modelled: refused,
        // not silently done as a plain rename.
        if !flags.is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        self.empty(reply, |s| {
            s.rename(
                (parent.0, Path::new(name)),
                (newparent.0, Path::new(newname)),
            )
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| s.open(ino.0)) {
            Ok(()) => reply.opened(FileHandle(ino.0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.with(|s| {
            let excl = flags & libc::O_EXCL != 0;
            let ino = s.create(parent.0, Path::new(name), mode & !umask & 0o7777, excl)?;
            if flags & libc::O_TRUNC != 0 {
                s.truncate(ino, 0)?;
            }
            Self::attr_of(s, ino)
        });
        match result {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(a.ino.0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|s| s.read(ino.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let append = flags.0 & libc::O_APPEND != 0;
        match self.with(|s| s.write(ino.0, offset, data, append)) {
            Ok(_) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    /// close(2) does not persist: a disk's cache keeps the bytes until a
    /// flush command, and only fsync sends one.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |_| Ok(()));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| s.sync(ino.0).map(|_| ()));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.with(|s| s.list(ino.0)) {
            Ok(entries) => entries,
            Err(e) => return reply.error(e),
        };
        let dots = [
            (ino.0, true, OsStr::new(".").to_os_string()),
            (ino.0, true, OsStr::new("..").to_os_string()),
        ];
        let all = dots.into_iter().chain(entries);
        for (i, (child, is_dir, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, file_type(is_dir), &name) {
                break;
            }
        }
        reply.ok();
    }

    /// Entries are durable as soon as they are made (see the module
    /// docs), so syncing a directory has nothing left to do.
    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |_| Ok(()));
    }

    /// The backing disk's numbers: a server sizing its store by free space
    /// (nats-server does) must see real ones, not zeros.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let stat = self.with(|s| statvfs(s.backing()));
        match stat {
            Ok(v) => reply.statfs(
                v.f_blocks,
                v.f_bfree,
                v.f_bavail,
                v.f_files,
                v.f_ffree,
                v.f_bsize as u32,
                v.f_namemax as u32,
                v.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let mut out = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `out` is written by
    // the call before it is read.
    let rc = unsafe { libc::statvfs(c.as_ptr(), out.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `out`.
    Ok(unsafe { out.assume_init() })
}
