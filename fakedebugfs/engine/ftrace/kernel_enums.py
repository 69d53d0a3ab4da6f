"""Enum constants that 6.18 print fmts name without a ``TRACE_DEFINE_ENUM``.

The kernel's ``trace`` text comes from compiled C, where these names are
numbers; the ``format`` file prints them as written.  Their values, by the
header that defines them, are those of the 6.18 x86_64 kernel (checked
against the BTF of a running 6.18.44: ``/sys/kernel/btf/vmlinux``).
:data:`KERNEL_ENUMS` is ``((name, value), ...)`` for
:func:`~.printfmt.compile_print_fmt`'s *symbols*.
"""

from __future__ import annotations


def _seq(prefix: str, names: str, start: int = 0) -> tuple:
    """An enum of consecutive values."""
    return tuple((prefix + n, start + i) for i, n in enumerate(names.split()))


def _bits(prefix: str, names: str, first: int = 0) -> tuple:
    """An enum of single bits ``1 << first``, ``1 << first + 1``, ..."""
    return tuple((prefix + n, 1 << (first + i)) for i, n in enumerate(names.split()))


def _given(prefix: str, pairs: str) -> tuple:
    return tuple((prefix + n, int(v, 0)) for n, v in (p.split("=") for p in pairs.split()))


KERNEL_ENUMS = (
    # arch/x86/include/asm/vmx.h: enum vm_instruction_error_number
    *_given("VMXERR_", "VMLAUNCH_NONCLEAR_VMCS=4 VMRESUME_NONLAUNCHED_VMCS=5 "
            "VMRESUME_AFTER_VMXOFF=6 ENTRY_INVALID_CONTROL_FIELD=7 "
            "ENTRY_INVALID_HOST_STATE_FIELD=8 ENTRY_EVENTS_BLOCKED_BY_MOV_SS=26"),
    # arch/x86/include/asm/kvm_host.h: enum kvm_apicv_inhibit
    *_seq("APICV_INHIBIT_REASON_", "DISABLED HYPERV ABSENT BLOCKIRQ PHYSICAL_ID_ALIASED "
          "APIC_ID_MODIFIED APIC_BASE_MODIFIED NESTED IRQWIN PIT_REINJ SEV "
          "LOGICAL_ID_ALIASED PHYSICAL_ID_TOO_BIG"),
    # include/vdso/clocksource.h: enum vdso_clock_mode (x86's
    # VDSO_ARCH_CLOCKMODES, arch/x86/include/asm/vdso/clocksource.h)
    *_seq("VDSO_CLOCKMODE_", "NONE TSC PVCLOCK HVCLOCK"),
    # include/linux/mmzone.h: enum vmscan_throttle_state
    *_seq("VMSCAN_THROTTLE_", "WRITEBACK ISOLATED NOPROGRESS CONGESTED"),
    # include/linux/fs.h: inode state bits (I_NEW, I_SYNC, I_LRU_ISOLATING
    # from enum inode_state_bits, the rest BIT(3)...)
    *_bits("I_", "NEW SYNC LRU_ISOLATING"),
    *_bits("I_", "DIRTY_SYNC DIRTY_DATASYNC DIRTY_PAGES WILL_FREE FREEING CLEAR REFERENCED "
           "LINKABLE DIRTY_TIME WB_SWITCH OVL_INUSE CREATING DONTCACHE SYNC_QUEUED "
           "PINNING_NETFS_WB", 4),
    # include/linux/mm_types.h: enum fault_flag, enum vm_fault_reason
    *_bits("FAULT_FLAG_", "WRITE MKWRITE ALLOW_RETRY RETRY_NOWAIT KILLABLE TRIED USER REMOTE "
           "INSTRUCTION INTERRUPTIBLE UNSHARE ORIG_PTE_VALID VMA_LOCK"),
    *_given("VM_FAULT_", "OOM=0x1 SIGBUS=0x2 MAJOR=0x4 HWPOISON=0x10 HWPOISON_LARGE=0x20 "
            "SIGSEGV=0x40 NOPAGE=0x100 LOCKED=0x200 RETRY=0x400 FALLBACK=0x800 "
            "DONE_COW=0x1000 NEEDDSYNC=0x2000 COMPLETED=0x4000"),
    # fs/btrfs/extent_map.h: extent map flags (ENUM_BIT)
    *_bits("EXTENT_FLAG_", "PINNED COMPRESS_ZLIB COMPRESS_LZO COMPRESS_ZSTD PREALLOC LOGGING "
           "MERGED"),
    # fs/btrfs/extent-io-tree.h: extent io tree bits (ENUM_BIT)
    *_bits("EXTENT_", "DIRTY LOCKED DIO_LOCKED DIRTY_LOG1 DIRTY_LOG2 DELALLOC DEFRAG BOUNDARY "
           "NODATASUM CLEAR_META_RESV NEED_WAIT NORESERVE QGROUP_RESERVED CLEAR_DATA_RESV "
           "DELALLOC_NEW"),
    # fs/btrfs/qgroup.h: QGROUP_RESERVE, QGROUP_RELEASE, QGROUP_FREE (ENUM_BIT)
    *_bits("QGROUP_", "RESERVE RELEASE FREE"),
    # fs/btrfs/delayed-ref.h: enum btrfs_delayed_ref_action
    *_seq("BTRFS_", "ADD_DELAYED_REF DROP_DELAYED_REF ADD_DELAYED_EXTENT UPDATE_DELAYED_HEAD", 1),
    # fs/btrfs/ordered-data.h: ordered extent flag bit numbers
    *_seq("BTRFS_ORDERED_", "REGULAR NOCOW PREALLOC COMPRESSED DIRECT IO_DONE COMPLETE IOERR "
          "TRUNCATED LOGGED LOGGED_CSUM PENDING ENCODED"),
    # include/net/tcp_states.h: TCP_ESTABLISHED = 1, ...
    *_seq("TCP_", "ESTABLISHED SYN_SENT SYN_RECV FIN_WAIT1 FIN_WAIT2 TIME_WAIT CLOSE "
          "CLOSE_WAIT LAST_ACK LISTEN CLOSING NEW_SYN_RECV", 1),
    # include/linux/edac.h: enum hw_event_mc_err_type
    *_seq("HW_EVENT_ERR_", "CORRECTED UNCORRECTED DEFERRED FATAL INFO"),
)


def _bitfields(spec: str) -> dict:
    """``member:bits`` in declaration order -> ``{member: (shift, bits)}``
    (x86_64 allocates bitfields from bit 0); ``-:n`` is padding."""
    layout, shift = {}, 0
    for item in spec.split():
        member, bits = item.split(":")
        if member != "-":
            layout[member] = (shift, int(bits))
        shift += int(bits)
    return layout


# unions that print fmts declare as locals (KVM_MMU_PAGE_PRINTK of
# arch/x86/kvm/mmu/mmutrace.h): ``member -> (bit offset, bits)`` in ``word``
KERNEL_UNIONS = {
    # arch/x86/include/asm/kvm_host.h: union kvm_mmu_page_role
    "union kvm_mmu_page_role": {"word": (0, 32), **_bitfields(
        "level:4 has_4_byte_gpte:1 quadrant:2 direct:1 access:3 invalid:1 efer_nx:1 cr0_wp:1 "
        "smep_andnot_wp:1 smap_andnot_wp:1 ad_disabled:1 guest_mode:1 passthrough:1 "
        "is_mirror:1 -:4 smm:8")},
}

__all__ = ["KERNEL_ENUMS", "KERNEL_UNIONS"]
