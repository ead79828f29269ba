"""geopmdpy.topo stand-in: domain constants, names and counts (see geopmdpy/topo.py)."""

DOMAIN_INVALID = -1
DOMAIN_BOARD = 0
DOMAIN_PACKAGE = 1
DOMAIN_CORE = 2
DOMAIN_CPU = 3
DOMAIN_MEMORY = 4
DOMAIN_PACKAGE_INTEGRATED_MEMORY = 5
DOMAIN_NIC = 6
DOMAIN_PACKAGE_INTEGRATED_NIC = 7
DOMAIN_GPU = 8
DOMAIN_PACKAGE_INTEGRATED_GPU = 9
DOMAIN_GPU_CHIP = 10
NUM_DOMAIN = 11

_NAMES = [
    "board",
    "package",
    "core",
    "cpu",
    "memory",
    "package_integrated_memory",
    "nic",
    "package_integrated_nic",
    "gpu",
    "package_integrated_gpu",
    "gpu_chip",
]
_COUNTS = {
    "board": 1,
    "package": 2,
    "core": 8,
    "cpu": 16,
    "memory": 1,
    "package_integrated_memory": 0,
    "nic": 0,
    "package_integrated_nic": 0,
    "gpu": 0,
    "package_integrated_gpu": 0,
    "gpu_chip": 0,
}


def domain_type(domain):
    if type(domain) is int:
        if 0 <= domain < NUM_DOMAIN:
            return domain
        raise RuntimeError(f"domain_type is out of range: {domain}")
    if domain in _NAMES:
        return _NAMES.index(domain)
    raise RuntimeError(
        "geopm_topo_domain_type() failed: <geopm> Invalid argument: "
        f"unrecognized domain_name: {domain}"
    )


def domain_name(domain):
    return _NAMES[domain_type(domain)]


def num_domain(domain):
    return _COUNTS[domain_name(domain)]


# Which domains hold which (board holds all): a signal can be read at its native domain or a
# coarser one, never a finer one (geopmdpy.pio.signal_domain_type() docstring).
_HOLDS = {
    DOMAIN_PACKAGE: {
        DOMAIN_CORE,
        DOMAIN_CPU,
        DOMAIN_PACKAGE_INTEGRATED_MEMORY,
        DOMAIN_PACKAGE_INTEGRATED_NIC,
        DOMAIN_PACKAGE_INTEGRATED_GPU,
    },
    DOMAIN_CORE: {DOMAIN_CPU},
    DOMAIN_GPU: {DOMAIN_GPU_CHIP},
}


def _contains(outer, inner):
    """Stand-in helper (not in the real module): is domain ``inner`` inside ``outer``?"""
    outer, inner = domain_type(outer), domain_type(inner)
    return outer in (inner, DOMAIN_BOARD) or inner in _HOLDS.get(outer, ())
