"""The guest machine's PCI devices, as the ``mmiotrace`` tracer lists them.

When ``trace_pipe`` is opened under ``mmiotrace``, the kernel's
``mmio_pipe_open`` and ``mmio_read`` (kernel/trace/trace_mmiotrace.c) first
hand out ``VERSION 20070824`` and then one ``PCIDEV`` line per PCI device
(``mmio_print_pcidev``): bus and devfn, vendor and device, the irq, the
start of the first seven resources or'ed with their low flag bits
(``PCI_REGION_FLAG_MASK``), their sizes, and the driver's name.  These
devices are the machine's, not the tracefs': the profile keeps them as
data (its ``pci_devices`` file), made here from sysfs, which shows the same
fields (``vendor``, ``device``, ``irq``, the ``resource`` lines ``start end
flags``, the ``driver`` link), in the order the kernel walks the bus
(``pci_get_device``: the devices' names in order).  Selecting ``mmiotrace``
to read the kernel's own lines would take every CPU but the first offline.
Run in the oracle guest::

    python -m fakedebugfs.oracle.pci_devices /sys/bus/pci/devices OUT
"""

from __future__ import annotations

import os
import sys

PCI_REGION_FLAG_MASK = 0x0F
RESOURCES = 7  # the six BARs and the expansion ROM


def _read(path: str) -> str:
    with open(path) as fp:
        return fp.read().strip()


def pcidev_line(devdir: str) -> str:
    """``mmio_print_pcidev`` of the device whose sysfs folder is *devdir*."""
    name = os.path.basename(devdir)  # domain:bus:slot.func
    _, bus, slotfn = name.split(":")
    slot, fn = slotfn.split(".")
    devfn = int(slot, 16) << 3 | int(fn, 16)
    vendor, device = int(_read(f"{devdir}/vendor"), 16), int(_read(f"{devdir}/device"), 16)
    irq = int(_read(f"{devdir}/irq"))
    res = [tuple(int(v, 16) for v in line.split())
           for line in _read(f"{devdir}/resource").splitlines()[:RESOURCES]]
    starts = " ".join(f"{s | f & PCI_REGION_FLAG_MASK:x}" for s, e, f in res)
    sizes = " ".join(f"{e - s + 1 if s < e else 0:x}" for s, e, f in res)
    drv = os.path.join(devdir, "driver")
    tail = f" {os.path.basename(os.readlink(drv))}" if os.path.islink(drv) else " "
    return (f"PCIDEV {int(bus, 16):02x}{devfn:02x} {vendor:04x}{device:04x} {irq:x} "
            f"{starts} {sizes}{tail}\n")


def pci_devices(root: str = "/sys/bus/pci/devices") -> str:
    """Every device's line, in the order the kernel lists them."""
    return "".join(pcidev_line(os.path.join(root, n)) for n in sorted(os.listdir(root)))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root, out = argv
    with open(out, "w") as fp:
        fp.write(pci_devices(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
