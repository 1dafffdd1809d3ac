//! Properties (`blkio_get_*` / `blkio_set_*`): one table naming each
//! property, its type and when it may be read and written; values come
//! from the instance or, once connected, from the device's queue limits.
//!
//! Errors: unknown name -ENOENT; wrong type -ENOTTY (the str calls convert
//! any type); read before it exists -ENODEV; read-only -EACCES; written in
//! a later state than allowed -EBUSY.

use std::ffi::{c_char, c_int, CString};

use mqblk::Device;

use crate::{c_str, entry, fail, instance, Blkio, Failure, State, MAX_MEM_REGIONS, MAX_QUEUES};

/// Most iovecs one readv/writev takes (`max-segments`): the most segments
/// one mqblk bio carries, as each readv/writev is one bio.
pub(crate) const MAX_SEGMENTS: c_int = mqblk::BIO_MAX_VECS as c_int;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Bool,
    Int,
    U64,
    Str,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::U64 => "uint64",
            Ty::Str => "str",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Bool(bool),
    Int(c_int),
    U64(u64),
    Str(String),
}

impl Val {
    fn to_text(&self) -> String {
        match self {
            Val::Bool(v) => v.to_string(),
            Val::Int(v) => v.to_string(),
            Val::U64(v) => v.to_string(),
            Val::Str(v) => v.clone(),
        }
    }
}

/// One property: readable from `readable` on; writable only in `writable`.
struct Prop {
    name: &'static str,
    ty: Ty,
    readable: State,
    writable: Option<State>,
}

const fn prop(name: &'static str, ty: Ty, readable: State, writable: Option<State>) -> Prop {
    Prop { name, ty, readable, writable }
}

use State::{Connected as C, Created as N};

const PROPS: &[Prop] = &[
    prop("driver", Ty::Str, N, None),
    prop("path", Ty::Str, N, Some(N)),
    prop("read-only", Ty::Bool, N, Some(N)),
    prop("can-add-queues", Ty::Bool, N, None),
    prop("capacity", Ty::U64, C, None),
    prop("max-queues", Ty::Int, C, None),
    prop("num-queues", Ty::Int, C, Some(C)),
    prop("num-poll-queues", Ty::Int, C, Some(C)),
    prop("supports-poll-queues", Ty::Bool, C, None),
    prop("max-mem-regions", Ty::U64, C, None),
    prop("may-pin-mem-regions", Ty::Bool, C, None),
    prop("mem-region-alignment", Ty::U64, C, None),
    prop("needs-mem-regions", Ty::Bool, C, None),
    prop("needs-mem-region-fd", Ty::Bool, C, None),
    prop("optimal-io-alignment", Ty::Int, C, None),
    prop("optimal-io-size", Ty::Int, C, None),
    prop("request-alignment", Ty::Int, C, None),
    prop("flush-needed", Ty::Bool, C, None),
    prop("buf-alignment", Ty::Int, C, None),
    prop("can-grow", Ty::Bool, C, None),
    prop("max-segments", Ty::Int, C, None),
    prop("max-segment-len", Ty::Int, C, None),
    prop("max-transfer", Ty::Int, C, None),
    prop("optimal-buf-alignment", Ty::Int, C, None),
    prop("supports-fua-natively", Ty::Bool, C, None),
    prop("max-write-zeroes-len", Ty::U64, C, None),
    prop("discard-alignment", Ty::Int, C, None),
    prop("discard-alignment-offset", Ty::Int, C, None),
    prop("max-discard-len", Ty::U64, C, None),
    // Zoned devices, under the names of libblkio's nvme-io_uring driver:
    // its manual spells them with '_', its own tests with '-'; both work.
    prop("zoned", Ty::Int, C, None),
    prop("zone_size", Ty::U64, C, None),
    prop("zone-size", Ty::U64, C, None),
    prop("nr_zones", Ty::U64, C, None),
    prop("nr-zones", Ty::U64, C, None),
    prop("max_open_zones", Ty::Int, C, None),
    prop("max-open-zones", Ty::Int, C, None),
    prop("max_active_zones", Ty::Int, C, None),
    prop("max-active-zones", Ty::Int, C, None),
];

/// Alignment of memory regions: a page, or the block size if larger (it
/// must be a multiple of buf-alignment).
pub(crate) fn mem_region_alignment(device: &Device) -> u64 {
    u64::from(device.limits().logical_block_size).max(4096)
}

fn clamp_int(v: u64) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

fn lookup(name: &str) -> Result<&'static Prop, Failure> {
    match PROPS.iter().find(|p| p.name == name) {
        Some(p) => Ok(p),
        None => fail(libc::ENOENT, format!("unknown property \"{name}\"")),
    }
}

fn read(b: &Blkio, p: &Prop) -> Result<Val, Failure> {
    if b.state < p.readable {
        return fail(
            libc::ENODEV,
            format!("property \"{}\" is available once the instance is {}", p.name, p.readable.name()),
        );
    }
    let v = match p.name {
        "driver" => Val::Str("mqblk".into()),
        "path" => Val::Str(b.path.clone().unwrap_or_default()),
        "read-only" => Val::Bool(b.read_only),
        "can-add-queues" => Val::Bool(true),
        "num-queues" => Val::Int(b.num_queues),
        "num-poll-queues" => Val::Int(b.num_poll_queues),
        "max-queues" => Val::Int(MAX_QUEUES as c_int),
        "max-mem-regions" => Val::U64(MAX_MEM_REGIONS),
        "may-pin-mem-regions" | "needs-mem-regions" | "needs-mem-region-fd" | "can-grow" => Val::Bool(false),
        "max-segments" => Val::Int(MAX_SEGMENTS),
        _ => read_device(b.device()?, p.name),
    };
    Ok(v)
}

/// The properties that describe the device: its queue limits.
fn read_device(device: &Device, name: &str) -> Val {
    let l = device.limits();
    let lbs = l.logical_block_size;
    let zoned = l.zoned.as_ref();
    match name {
        "capacity" => Val::U64(l.capacity_bytes),
        "supports-poll-queues" => Val::Bool(Blkio::supports_poll_queues(device)),
        "mem-region-alignment" => Val::U64(mem_region_alignment(device)),
        "optimal-io-alignment" => Val::Int(l.physical_block_size as c_int),
        "optimal-io-size" | "max-segment-len" | "discard-alignment-offset" => Val::Int(0),
        // Buffers are handed to the driver as they are: block-size aligned
        // memory suits every driver, O_DIRECT files included.
        "request-alignment" | "buf-alignment" => Val::Int(lbs as c_int),
        "optimal-buf-alignment" => Val::Int(4096),
        "flush-needed" => Val::Bool(l.write_cache),
        "max-transfer" => Val::Int(clamp_int(l.max_transfer_bytes().min(mqblk::MAX_BIO_BYTES))),
        "supports-fua-natively" => Val::Bool(l.fua),
        "max-write-zeroes-len" => Val::U64(u64::from(l.max_write_zeroes_sectors) * mqblk::SECTOR_SIZE),
        "max-discard-len" => Val::U64(u64::from(l.max_discard_sectors) * mqblk::SECTOR_SIZE),
        "discard-alignment" => Val::Int(if l.max_discard_sectors > 0 { lbs as c_int } else { 0 }),
        "zoned" => Val::Int(if zoned.is_some() { 2 } else { 0 }),
        "zone_size" | "zone-size" => Val::U64(zoned.map_or(0, |z| z.zone_sectors * mqblk::SECTOR_SIZE)),
        "nr_zones" | "nr-zones" => Val::U64(zoned.map_or(0, |z| u64::from(z.nr_zones))),
        "max_open_zones" | "max-open-zones" => Val::Int(zoned.map_or(0, |z| z.max_open_zones as c_int)),
        "max_active_zones" | "max-active-zones" => Val::Int(zoned.map_or(0, |z| z.max_active_zones as c_int)),
        other => unreachable!("property {other} is in the table but has no value"),
    }
}

fn write(b: &mut Blkio, p: &Prop, v: Val) -> Result<(), Failure> {
    let Some(when) = p.writable else {
        return fail(libc::EACCES, format!("property \"{}\" is read-only", p.name));
    };
    if b.state != when {
        let errno = if b.state > when { libc::EBUSY } else { libc::ENODEV };
        return fail(
            errno,
            format!(
                "property \"{}\" can be set only while {} (the instance is {})",
                p.name,
                when.name(),
                b.state.name()
            ),
        );
    }
    match (p.name, v) {
        ("path", Val::Str(s)) => b.path = Some(s),
        ("read-only", Val::Bool(v)) => b.read_only = v,
        ("num-queues" | "num-poll-queues", Val::Int(n)) => {
            if !(0..=MAX_QUEUES as c_int).contains(&n) {
                return fail(libc::EINVAL, format!("{}={n} (accepted: 0..={MAX_QUEUES})", p.name));
            }
            let other = if p.name == "num-queues" { b.num_poll_queues } else { b.num_queues };
            if (n + other) as usize > MAX_QUEUES {
                return fail(libc::EINVAL, format!("num-queues + num-poll-queues exceeds max-queues={MAX_QUEUES}"));
            }
            if p.name == "num-queues" {
                b.num_queues = n;
            } else {
                b.num_poll_queues = n;
            }
        }
        (name, v) => unreachable!("writable property {name} given {v:?}"),
    }
    Ok(())
}

fn parse(p: &Prop, s: &str) -> Result<Val, Failure> {
    let bad = || fail(libc::EINVAL, format!("property \"{}\" ({}): cannot parse \"{s}\"", p.name, p.ty.name()));
    Ok(match p.ty {
        Ty::Str => Val::Str(s.to_string()),
        Ty::Bool => match s {
            "true" | "1" | "on" | "yes" => Val::Bool(true),
            "false" | "0" | "off" | "no" => Val::Bool(false),
            _ => return bad(),
        },
        Ty::Int => match s.trim().parse() {
            Ok(v) => Val::Int(v),
            Err(_) => return bad(),
        },
        Ty::U64 => match s.trim().parse() {
            Ok(v) => Val::U64(v),
            Err(_) => return bad(),
        },
    })
}

fn check_type(p: &Prop, ty: Ty) -> Result<(), Failure> {
    if p.ty != ty {
        return fail(libc::ENOTTY, format!("property \"{}\" is of type {}, not {}", p.name, p.ty.name(), ty.name()));
    }
    Ok(())
}

/// Common body of the getters: look up, check the type, read.
///
/// # Safety
/// `b` as in [`instance`], `name` a C string.
unsafe fn get(b: *mut Blkio, name: *const c_char, ty: Ty) -> Result<Val, Failure> {
    // SAFETY: by the caller's contract.
    let (b, name) = unsafe { (instance(b)?, c_str(name, "property name")?) };
    let p = lookup(name)?;
    if ty != Ty::Str {
        check_type(p, ty)?;
    }
    read(b, p)
}

/// # Safety
/// `b` as in [`instance`], `name` a C string.
unsafe fn set(b: *mut Blkio, name: *const c_char, ty: Ty, v: Val) -> Result<c_int, Failure> {
    // SAFETY: by the caller's contract.
    let (b, name) = unsafe { (instance(b)?, c_str(name, "property name")?) };
    let p = lookup(name)?;
    let v = match v {
        Val::Str(s) if p.ty != Ty::Str => parse(p, &s)?,
        v => {
            check_type(p, ty)?;
            v
        }
    };
    write(b, p, v).map(|()| 0)
}

fn out_ptr<T>(value: *mut T) -> Result<*mut T, Failure> {
    if value.is_null() {
        return fail(libc::EINVAL, "value pointer is NULL");
    }
    Ok(value)
}

macro_rules! getter {
    ($fn:ident, $t:ty, $ty:expr, $pat:path) => {
        /// # Safety
        /// `b` as in `instance`, `name` a C string, `value` null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $fn(b: *mut Blkio, name: *const c_char, value: *mut $t) -> c_int {
            entry(|| {
                let value = out_ptr(value)?;
                // SAFETY: by the caller's contract.
                let $pat(v) = (unsafe { get(b, name, $ty) })? else { unreachable!("type checked") };
                // SAFETY: non-null and writable by the caller's contract.
                unsafe { value.write(v) };
                Ok(0)
            })
        }
    };
}

getter!(blkio_get_bool, bool, Ty::Bool, Val::Bool);
getter!(blkio_get_int, c_int, Ty::Int, Val::Int);
getter!(blkio_get_uint64, u64, Ty::U64, Val::U64);

/// The value in text, in memory the caller frees with free(3).
///
/// # Safety
/// `b` as in [`instance`], `name` a C string, `value` null or writable.
#[no_mangle]
pub unsafe extern "C" fn blkio_get_str(b: *mut Blkio, name: *const c_char, value: *mut *mut c_char) -> c_int {
    entry(|| {
        let value = out_ptr(value)?;
        // SAFETY: by the caller's contract.
        let text = unsafe { get(b, name, Ty::Str) }?.to_text();
        let text = CString::new(text).or_else(|_| fail(libc::EINVAL, "the value holds a NUL byte"))?;
        // SAFETY: a NUL-terminated string; strdup's copy belongs to the caller.
        let copy = unsafe { libc::strdup(text.as_ptr()) };
        if copy.is_null() {
            return fail(libc::ENOMEM, "out of memory");
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { value.write(copy) };
        Ok(0)
    })
}

/// # Safety
/// `b` as in [`instance`], `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn blkio_set_bool(b: *mut Blkio, name: *const c_char, value: bool) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { set(b, name, Ty::Bool, Val::Bool(value)) })
}

/// # Safety
/// `b` as in [`instance`], `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn blkio_set_int(b: *mut Blkio, name: *const c_char, value: c_int) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { set(b, name, Ty::Int, Val::Int(value)) })
}

/// # Safety
/// `b` as in [`instance`], `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn blkio_set_uint64(b: *mut Blkio, name: *const c_char, value: u64) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { set(b, name, Ty::U64, Val::U64(value)) })
}

/// # Safety
/// `b` as in [`instance`], `name` and `value` C strings.
#[no_mangle]
pub unsafe extern "C" fn blkio_set_str(b: *mut Blkio, name: *const c_char, value: *const c_char) -> c_int {
    entry(|| {
        // SAFETY: by the caller's contract.
        let value = unsafe { c_str(value, "value") }?.to_string();
        // SAFETY: by the caller's contract.
        unsafe { set(b, name, Ty::Str, Val::Str(value)) }
    })
}
