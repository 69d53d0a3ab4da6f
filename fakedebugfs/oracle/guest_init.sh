#!/bin/busybox sh
# /init of the oracle's initramfs (fakedebugfs.oracle.image builds it).
#
# The guest is a Debian kernel with nothing of its own but busybox and the
# 9p modules: the host's root is shared read-only (tag "hostroot") and
# mounted at /host, with this guest's /proc, /sys, /dev, tracefs, debugfs
# and a tmpfs /tmp laid over it, so the host's own programs (trace-cmd,
# bash, python3, perf) run inside with `chroot /host`.  The work folder
# (tag "work") is mounted writable at the same path as on the host.
#
# The agent: the host writes <work>/req/<id>.sh (renamed into place whole);
# the guest, looking every 0.1 s, takes it (renames it <id>.run), runs it
# with bash in the chroot, stdout and stderr to <id>.out and <id>.err, and
# writes its exit status to <id>.rc when it ends.  Requests run side by
# side.  (A virtio-serial port was tried first: a request sent by a caller
# that closed its connection at once never reached the guest's reader.)
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /host
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
rel=$(uname -r)
for m in netfs 9pnet 9pnet_virtio 9p; do
    insmod /lib/modules/$rel/$m.ko || echo "oracle: insmod $m failed"
done
work=$(sed -n 's/.*oracle.work=\([^ ]*\).*/\1/p' /proc/cmdline)
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro hostroot /host \
    || { echo "oracle: cannot mount the host's root"; poweroff -f; }
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t tracefs nodev /host/sys/kernel/tracing
mount -t debugfs nodev /host/sys/kernel/debug
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
# the host's /tmp and /run, kept (read-only) beside the guest's own, for
# the folders the host asks to see there (oracle.show: a checkout or a venv
# under /tmp, say)
mkdir -p /hosttmp /hostrun
mount --bind /host/tmp /hosttmp
mount --bind /host/run /hostrun
mount -t tmpfs tmpfs /host/tmp
mount -t tmpfs tmpfs /host/run
mount -t tmpfs tmpfs /host/root/.cache 2>/dev/null
show=$(sed -n 's/.*oracle.show=\([^ ]*\).*/\1/p' /proc/cmdline)
for dir in $(echo "$show" | tr , ' '); do
    case "$dir" in
    /tmp/*) mkdir -p "/host$dir" && mount --bind "/hosttmp/${dir#/tmp/}" "/host$dir" ;;
    /run/*) mkdir -p "/host$dir" && mount --bind "/hostrun/${dir#/run/}" "/host$dir" ;;
    esac || echo "oracle: cannot show the host's $dir"
done
case "$work" in
/tmp/*|/run/*) mkdir -p "/host$work" ;;
esac
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 work "/host$work" \
    || { echo "oracle: cannot mount the work folder $work"; poweroff -f; }
hostname oracle
ip link set lo up 2>/dev/null
req="/host$work/req"
mkdir -p "$req"
echo "oracle: ready, work $work (requests side by side)"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
while :; do
    for f in "$req"/*.sh; do
        [ -e "$f" ] || continue
        id=${f##*/}
        id=${id%.sh}
        mv "$f" "$req/$id.run" 2>/dev/null || continue
        (
            chroot /host /bin/sh -c 'cd /tmp && exec /bin/bash "$0"' "$work/req/$id.run" \
                < /dev/null > "$req/$id.out" 2> "$req/$id.err"
            echo $? > "$req/$id.rc.tmp"
            mv "$req/$id.rc.tmp" "$req/$id.rc"
        ) &
    done
    usleep 100000
done
