#!/bin/bash
# memorymax.sh: measure rootgated's own memory bound where this machine
# cannot: under a booted systemd whose cgroup v2 tree has the memory
# controller (this project's CI machines mount it on cgroup v1, so neither
# the host nor a systemd-nspawn box has it). It boots a Debian 12 virtual
# machine (qemu, software emulation; VM_KVM=1 for KVM),
# installs rootgated and its units as the package lays them out, floods the
# daemon with N requests at once whose runs each write 16 MiB to stderr,
# each answer read at RATE bytes a second, and prints what the daemon's
# own cgroup (rootgate.service/daemon) saw: its memory.max (written by the
# daemon, docs/operations.md "The daemon's own memory"), its peak, its OOM
# events, and whether the daemon is the same process afterwards.
#
# Usage (as root, from the checkout): packaging/vm/memorymax.sh
#   VM_DIR    the cached root file system and image (/var/tmp/rootgate-vm)
#   FLOOD_N   requests at once (32); FLOOD_RATE  bytes/s read per answer (1 MiB)
#   ROOTGATED a rootgated binary to install instead of building one
# The first run debootstraps Debian 12 with its kernel (about 5 minutes);
# later runs reuse it. Measured figures: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
VM_DIR=${VM_DIR:-/var/tmp/rootgate-vm}
R=$VM_DIR/rootfs
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ ! -e "$R/.vm-created" ]; then
	mkdir -p "$VM_DIR"
	mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
	echo "memorymax: debootstrap bookworm with its kernel into $R"
	debootstrap --variant=minbase --include=systemd,systemd-sysv,linux-image-amd64,initramfs-tools,udev,dbus,procps \
		bookworm "$R" "$mirror" >"$VM_DIR/debootstrap.log" 2>&1
	echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$R/etc/fstab"
	ln -sf /dev/null "$R/etc/systemd/system/serial-getty@ttyS0.service"
	cat >"$R/etc/systemd/system/memorymax.service" <<'UNIT'
[Unit]
Description=rootgate memory bound measurement
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/sh -c '/root/measure.sh > /dev/ttyS0 2>&1; echo MEASURE-EXIT=$? > /dev/ttyS0; systemctl poweroff'
[Install]
WantedBy=multi-user.target
UNIT
	ln -sf /etc/systemd/system/memorymax.service "$R/etc/systemd/system/multi-user.target.wants/memorymax.service"
	touch "$R/.vm-created"
fi

# rootgate as the package lays it out, a policy that allows the flood.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/rootgate ./cmd/rootgated
CGO_ENABLED=0 go build -o "$bin/flood" ./packaging/vm/flood
install -m 0755 "${ROOTGATED:-$bin/rootgated}" "$R/usr/sbin/rootgated"
install -m 0755 "$bin/rootgate" "$R/usr/bin/rootgate"
install -m 0755 "$bin/flood" "$R/root/flood"
install -m 0644 systemd/rootgate.service systemd/rootgate.socket systemd/rootgate-approve.socket "$R/usr/lib/systemd/system/"
install -D -m 0644 systemd/rootgate.sysusers "$R/usr/lib/sysusers.d/rootgate.conf"
install -D -m 0644 systemd/rootgate.tmpfiles "$R/usr/lib/tmpfiles.d/rootgate.conf"
install -d "$R/etc/rootgate" "$R/etc/systemd/system/sockets.target.wants"
echo 'allow privileged sh ...' >"$R/etc/rootgate/policy"
for s in rootgate.socket rootgate-approve.socket; do
	ln -sf "/usr/lib/systemd/system/$s" "$R/etc/systemd/system/sockets.target.wants/$s"
done
cat >"$R/root/measure.sh" <<MEASURE
#!/bin/sh
systemd-sysusers /usr/lib/sysusers.d/rootgate.conf
systemd-tmpfiles --create /usr/lib/tmpfiles.d/rootgate.conf
rootgate ping
cg=/sys/fs/cgroup/system.slice/rootgate.service
pid=\$(systemctl show -p MainPID --value rootgate.service)
echo "controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "daemon/memory.max: \$(cat \$cg/daemon/memory.max)"
journalctl -q -u rootgate.service -o cat | grep "own memory"
/root/flood -n ${FLOOD_N:-32} -rate ${FLOOD_RATE:-1048576}
echo "afterwards: pid \$pid -> \$(systemctl show -p MainPID --value rootgate.service)"
echo "daemon/memory.peak: \$(cat \$cg/daemon/memory.peak 2>&1)"
echo "daemon/memory.events: \$(tr '\n' ' ' < \$cg/daemon/memory.events 2>&1)"
grep VmHWM /proc/\$pid/status
journalctl -q -u rootgate.service -p warning -o cat | tail -5
MEASURE
chmod 0755 "$R/root/measure.sh"

img=$VM_DIR/vm.img
rm -f "$img"
truncate -s 3G "$img"
mkfs.ext4 -q -F -d "$R" "$img"
# Software emulation unless VM_KVM=1: nested KVM on a machine that is
# itself a virtual machine may not boot at all.
accel=tcg
if [ -n "${VM_KVM:-}" ]; then accel=kvm; fi
kernel=$(ls "$R"/boot/vmlinuz-* | tail -1)
initrd=$(ls "$R"/boot/initrd.img-* | tail -1)
echo "memorymax: booting ($accel)"
timeout 1200 qemu-system-x86_64 -accel "$accel" -m 2048 -smp 2 -kernel "$kernel" -initrd "$initrd" \
	-append "root=/dev/vda rw console=ttyS0 quiet" -drive "file=$img,format=raw,if=virtio" \
	-nographic -no-reboot -nic none >"$VM_DIR/console.log" 2>&1 || true
grep -a -v '^\[' "$VM_DIR/console.log" | grep -a -v '^$' | sed -n '/^pong/,$p'
grep -aq 'MEASURE-EXIT=0' "$VM_DIR/console.log"
