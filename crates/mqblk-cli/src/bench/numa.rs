//! fio's `numa_cpu_nodes` and `numa_mem_policy`: a job's thread runs on
//! the CPUs of the NUMA nodes named, and its memory (the job's buffers,
//! allocated on its thread after this) comes from the nodes its policy
//! names, as fio does through libnuma.
//!
//! Relies on sysfs (/sys/devices/system/node/nodeN/cpulist, .../online)
//! for the machine's nodes and on the set_mempolicy system call (raw,
//! through libc: no libnuma). A node the machine does not have is an
//! error naming it, as libnuma's parser makes it in fio.

use super::cpus::CpuList;
use super::options::{err, OptionError};

/// A job's NUMA options, with fio's defaults (none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumaOptions {
    /// `numa_cpu_nodes`: the nodes whose CPUs the job runs on.
    pub cpu_nodes: Option<CpuList>,
    /// `numa_mem_policy`.
    pub mem_policy: Option<MemPolicy>,
}

/// `numa_mem_policy=MODE[:NODES]` (fio's modes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPolicy {
    Default,
    Local,
    Prefer(usize),
    Bind(CpuList),
    Interleave(CpuList),
}

/// The option names (options.rs' `job_options` adds them).
pub const NUMA_OPTIONS: &[&str] = &["numa_cpu_nodes", "numa_mem_policy"];

/// The kernel's MPOL_* modes (include/uapi/linux/mempolicy.h).
const MPOL_DEFAULT: libc::c_long = 0;
const MPOL_PREFERRED: libc::c_long = 1;
const MPOL_BIND: libc::c_long = 2;
const MPOL_INTERLEAVE: libc::c_long = 3;
const MPOL_LOCAL: libc::c_long = 4;

impl NumaOptions {
    /// Sets one NUMA option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "numa_cpu_nodes" => self.cpu_nodes = Some(CpuList::parse(key, v()?)?),
            "numa_mem_policy" => self.mem_policy = Some(MemPolicy::parse(v()?)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks every node named is one the machine has.
    pub(super) fn validate(&self, job: &str) -> Result<(), OptionError> {
        let online = online_nodes().map_err(|e| OptionError(format!("job '{job}': {e}")))?;
        let named = self.cpu_nodes.iter().flat_map(|l| l.0.iter().map(|&n| ("numa_cpu_nodes", n)));
        let policy_nodes = match &self.mem_policy {
            Some(MemPolicy::Prefer(n)) => vec![*n],
            Some(MemPolicy::Bind(l) | MemPolicy::Interleave(l)) => l.0.clone(),
            _ => Vec::new(),
        };
        let named = named.chain(policy_nodes.into_iter().map(|n| ("numa_mem_policy", n)));
        for (key, node) in named {
            if !online.contains(&node) {
                return err(format!("job '{job}': {key}: NUMA node {node} is not online (online: {online:?})"));
            }
        }
        Ok(())
    }

    /// The CPUs of `cpu_nodes`, if given.
    pub fn cpus(&self) -> Result<Option<Vec<usize>>, String> {
        let Some(nodes) = &self.cpu_nodes else { return Ok(None) };
        let mut cpus = Vec::new();
        for node in &nodes.0 {
            let path = format!("/sys/devices/system/node/node{node}/cpulist");
            let list = std::fs::read_to_string(&path).map_err(|e| format!("numa_cpu_nodes: {path}: {e}"))?;
            if !list.trim().is_empty() {
                cpus.extend(CpuList::parse("numa_cpu_nodes", list.trim()).map_err(|e| e.0)?.0);
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(Some(cpus))
    }

    /// Sets the calling thread's memory policy, if given.
    pub fn apply_mem_policy(&self) -> Result<(), String> {
        let Some(policy) = &self.mem_policy else { return Ok(()) };
        let (mode, nodes): (libc::c_long, &[usize]) = match policy {
            MemPolicy::Default => (MPOL_DEFAULT, &[]),
            MemPolicy::Local => (MPOL_LOCAL, &[]),
            MemPolicy::Prefer(n) => (MPOL_PREFERRED, std::slice::from_ref(n)),
            MemPolicy::Bind(l) => (MPOL_BIND, &l.0),
            MemPolicy::Interleave(l) => (MPOL_INTERLEAVE, &l.0),
        };
        let mut mask = [0 as libc::c_ulong; 16]; // 1,024 nodes
        let bits = libc::c_ulong::BITS as usize;
        for &n in nodes {
            mask[n / bits] |= 1 << (n % bits);
        }
        let maxnode = if nodes.is_empty() { 0 } else { (mask.len() * bits) as libc::c_ulong };
        let mask_ptr = if nodes.is_empty() { std::ptr::null() } else { mask.as_ptr() };
        // SAFETY: set_mempolicy reads `maxnode` bits from `mask_ptr`, which
        // points at `mask` (16 words = 1,024 bits = maxnode) or is null
        // with maxnode 0; it changes only this thread's policy.
        let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask_ptr, maxnode) };
        if rc != 0 {
            return Err(format!("numa_mem_policy: set_mempolicy: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl MemPolicy {
    fn parse(v: &str) -> Result<Self, OptionError> {
        let key = "numa_mem_policy";
        let (mode, nodes) = v.split_once(':').map_or((v, None), |(m, n)| (m, Some(n)));
        let list = || match nodes {
            Some(n) => CpuList::parse(key, n),
            None => err(format!("{key}: '{mode}' needs nodes ({mode}:0-1)")),
        };
        Ok(match mode {
            "default" => MemPolicy::Default,
            "local" => MemPolicy::Local,
            "prefer" => {
                let l = list()?;
                match l.0[..] {
                    [n] => MemPolicy::Prefer(n),
                    _ => return err(format!("{key}: prefer takes one node, not '{}'", nodes.unwrap_or(""))),
                }
            }
            "bind" => MemPolicy::Bind(list()?),
            "interleave" => MemPolicy::Interleave(list()?),
            _ => return err(format!("{key}: bad mode '{mode}' (accepted: default, prefer, bind, interleave, local)")),
        })
    }
}

/// The machine's online NUMA nodes (a machine without NUMA in sysfs has
/// node 0).
fn online_nodes() -> Result<Vec<usize>, String> {
    match std::fs::read_to_string("/sys/devices/system/node/online") {
        Ok(list) => CpuList::parse("online NUMA nodes", list.trim()).map(|l| l.0).map_err(|e| e.0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![0]),
        Err(e) => Err(format!("/sys/devices/system/node/online: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_as_fio_writes_them() {
        let mut o = NumaOptions::default();
        assert!(o.set("numa_cpu_nodes", Some("0")).unwrap());
        assert!(o.set("numa_mem_policy", Some("bind:0")).unwrap());
        assert_eq!(o.mem_policy, Some(MemPolicy::Bind(CpuList(vec![0]))));
        assert!(o.set("numa_mem_policy", Some("prefer:0-1")).unwrap_err().0.contains("one node"));
        assert!(o.set("numa_mem_policy", Some("bind")).unwrap_err().0.contains("needs nodes"));
        assert!(o.set("numa_mem_policy", Some("spread:0")).unwrap_err().0.contains("bad mode"));
        assert!(!o.set("iodepth", Some("1")).unwrap());
    }

    /// Node 0 exists on every Linux machine: its CPUs are this thread's
    /// to run on, and binding memory to it works; a node past the last
    /// online one is refused by name.
    #[test]
    fn node_zero_is_usable_and_a_missing_node_is_named() {
        let mut o = NumaOptions::default();
        o.set("numa_cpu_nodes", Some("0")).unwrap();
        o.set("numa_mem_policy", Some("bind:0")).unwrap();
        o.validate("j").unwrap();
        assert!(!o.cpus().unwrap().unwrap().is_empty());
        let missing = online_nodes().unwrap().iter().max().unwrap() + 1;
        o.set("numa_cpu_nodes", Some(&missing.to_string())).unwrap();
        let e = o.validate("j").unwrap_err().0;
        assert!(e.contains(&format!("NUMA node {missing} is not online")), "{e}");
        // Binding on a thread of its own, so the test runner's threads
        // keep the default policy.
        std::thread::spawn(|| {
            let mut o = NumaOptions::default();
            o.set("numa_mem_policy", Some("bind:0")).unwrap();
            o.apply_mem_policy().unwrap();
            let v = vec![1u8; 1 << 20];
            assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 1 << 20);
        })
        .join()
        .unwrap();
    }
}
