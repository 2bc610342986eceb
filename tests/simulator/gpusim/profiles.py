"""GPU models the simulator can put in a host.

Numbers come from the real captures (see captures/README.md), except where a
profile says otherwise in `estimated`.
"""

from __future__ import annotations

import collections

# PCI bus numbers of the eight GPUs of a typical HGX / 8-way PCIe server, in nvidia-smi order.
EIGHT_WAY_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


# capture: captures/<folder> giving the field catalog and baseline values; cuda_version: the "CUDA Version" line of
# nvidia-smi --version. A named tuple, not a dataclass: the fake nvidia-smi imports this on every call.
Profile = collections.namedtuple(
    "Profile", "key product_name memory_total_mib memory_reserved_mib idle_used_mib driver_version capture mig "
    "mig_devices default_gpu_count estimated cuda_version",
    defaults=(False, (), 8, (), "13.1"))


PROFILES = {
    profile.key: profile
    for profile in (
        Profile(
            key="rtx-pro-6000-blackwell",
            product_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_mib=97887,
            memory_reserved_mib=612,
            idle_used_mib=0,
            driver_version="580.105.06",
            capture="h200",
            estimated=("memory_reserved_mib", "cuda_version",
                       "field values other than name, memory and driver (H200 capture)"),
            cuda_version="13.0",
        ),
        Profile("h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", 81559, 479, 0, "590.48.01", "h100-80gb-hbm3"),
        Profile("h200", "NVIDIA H200", 143771, 614, 0, "590.48.01", "h200"),
        Profile("h100-mig", "NVIDIA H100 80GB HBM3", 81559, 479, 59, "590.48.01", "h100-mig", mig=True,
                mig_devices=("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")),
        Profile("h200-mig", "NVIDIA H200", 143771, 614, 55, "590.48.01", "h200-mig", mig=True,
                mig_devices=("1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb")),
        Profile("l40s", "NVIDIA L40S", 46068, 609, 0, "595.80", "l40s", cuda_version="13.2"),
    )
}


def gpu_identities(host: str, count: int) -> list[dict[str, object]]:
    """Stable UUIDs, serials and PCI addresses for the GPUs of one simulated host."""
    import uuid  # pylint: disable=import-outside-toplevel  # only when a host is made, not in every fake tool call
    gpus = []
    for index in range(count):
        bus = EIGHT_WAY_BUSES[index] if index < len(EIGHT_WAY_BUSES) else f"{0x20 + index:02X}"
        gpu_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"gpusim://{host}/gpu/{index}")
        gpus.append({
            "index": index,
            "minor": index,
            "uuid": f"GPU-{gpu_uuid}",
            "serial": f"{1650000000000 + gpu_uuid.int % 10**12:013d}",
            "bus_id": f"00000000:{bus}:00.0",
        })
    return gpus
