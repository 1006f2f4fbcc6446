import os

from localspec import cpus
from localspec.cpus import allowed_cpus, default_threads, parse_cpu_list


def make_root(tmp_path, core_ids=None, files=()):
    """A fixture tree: /proc/cpuinfo with one block per entry of ``core_ids`` (its core id; None: a block
    without topology, as some ARM kernels write) and ``files``, (path below root, text) pairs."""
    blocks = []
    for cpu, core in enumerate(core_ids or ()):
        block = f"processor\t: {cpu}\nmodel name\t: Test CPU\n"
        if core is not None:
            block += f"physical id\t: 0\ncore id\t\t: {core}\n"
        blocks.append(block)
    if blocks:
        files = [("proc/cpuinfo", "\n".join(blocks)), *files]
    for rel, text in files:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def linux(allowed, root):
    return default_threads(allowed, root, platform="linux")


def test_cpu_lists_read_like_the_kernel_writes_them():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("") == set()


def test_smt_desktop_counts_physical_cores(tmp_path):
    root = make_root(tmp_path, [0, 1, 2, 3, 0, 1, 2, 3])  # 4 cores, siblings n and n+4
    assert linux(range(8), root) == 4
    assert linux({0, 1}, root) == 2


def test_affinity_on_two_siblings_of_one_core_is_one_thread(tmp_path):
    root = make_root(tmp_path, [0, 0, 1, 1, 2, 2, 3, 3])  # siblings side by side
    assert linux({0, 1}, root) == 1
    assert linux({0, 2}, root) == 2


def test_without_cpuinfo_topology_sysfs_siblings_name_the_core(tmp_path):
    siblings = [
        (f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", f"{cpu % 4},{cpu % 4 + 4}")
        for cpu in range(8)
    ]
    assert linux(range(8), make_root(tmp_path, [None] * 8, siblings)) == 4


def test_intel_hybrid_leaves_out_the_e_cores(tmp_path):
    p_cores = [core for core in range(0, 32, 4) for _ in range(2)]  # 8 P-cores with HT: cpus 0-15
    e_cores = list(range(32, 40))  # 8 E-cores: cpus 16-23
    root = make_root(
        tmp_path, p_cores + e_cores, [("sys/devices/cpu_core/cpus", "0-15\n"), ("sys/devices/cpu_atom/cpus", "16-23\n")]
    )
    assert linux(range(24), root) == 8
    assert linux(range(16, 24), root) == 8  # held to E-cores only: those are what there is
    assert linux({0, 1, 2, 16, 17}, root) == 2


def test_only_efficiency_cores_allowed_counts_their_physical_cores(tmp_path):
    root = make_root(tmp_path, [0, 0, 1, 1], [("sys/devices/cpu_atom/cpus", "0-3")])
    assert linux(range(4), root) == 2


def test_big_little_keeps_the_highest_capacity(tmp_path):
    capacity = [(f"sys/devices/system/cpu/cpu{cpu}/cpu_capacity", f"{512 if cpu < 4 else 1024}\n") for cpu in range(8)]
    root = make_root(tmp_path, [None] * 8, capacity)
    assert linux(range(8), root) == 4
    assert linux(range(4), root) == 4  # only LITTLE cores allowed: all of them
    assert linux(range(3, 6), root) == 2


def test_equal_capacities_keep_every_core(tmp_path):
    capacity = [(f"sys/devices/system/cpu/cpu{cpu}/cpu_capacity", "1024\n") for cpu in range(8)]
    assert linux(range(8), make_root(tmp_path, [None] * 8, capacity)) == 8


def test_unparsable_files_fall_back_to_the_allowed_cpus(tmp_path):
    good = [0, 1, 2, 3, 0, 1, 2, 3]  # would read as 4 cores
    assert linux(range(8), make_root(tmp_path / "atom", good, [("sys/devices/cpu_atom/cpus", "garbage")])) == 8
    capacity = [(f"sys/devices/system/cpu/cpu{cpu}/cpu_capacity", "big") for cpu in range(8)]
    assert linux(range(8), make_root(tmp_path / "capacity", good, capacity)) == 8
    bad_cpuinfo = [("proc/cpuinfo", "processor : zero\ncore id : 0\n")]
    assert linux(range(6), make_root(tmp_path / "cpuinfo", files=bad_cpuinfo)) == 6
    assert linux(range(3), tmp_path / "missing") == 3
    assert linux(set(), tmp_path / "missing") == 1


def test_macos_asks_sysctl_for_performance_cores(monkeypatch):
    answers = {"hw.perflevel0.physicalcpu": 4, "hw.physicalcpu": 10}
    monkeypatch.setattr(cpus, "_sysctl", answers.get)
    assert default_threads(range(10), platform="darwin") == 4
    assert default_threads(range(2), platform="darwin") == 2  # never above the CPUs there are
    answers = {"hw.physicalcpu": 6}  # an Intel Mac with HT: no perflevels
    monkeypatch.setattr(cpus, "_sysctl", answers.get)
    assert default_threads(range(12), platform="darwin") == 6


def test_macos_without_sysctl_falls_back_to_the_cpu_count(monkeypatch):
    def missing(name):
        raise FileNotFoundError("sysctl")

    monkeypatch.setattr(cpus, "_sysctl", missing)
    assert default_threads(range(6), platform="darwin") == 6


def test_this_machine_gets_between_one_thread_and_its_cpus():
    assert 1 <= default_threads() <= min(os.cpu_count(), len(allowed_cpus()))


def test_available_memory_reads_meminfo(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:  24000000 kB\nMemFree: 100 kB\nMemAvailable:  12000000 kB\n")
    assert cpus.available_memory(tmp_path, "linux") == 12000000 * 1024
    assert cpus.available_memory(tmp_path / "nowhere", "linux") is None
    assert cpus.available_memory(tmp_path, "win32") is None
