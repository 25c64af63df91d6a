# How a guest image is built: the constants and steps scripts/guest-image
# runs (it sources this file). Part of the recipe, so any change here gives
# every image a new hash and the next run builds it again; the commands,
# the cache and its age rule live in scripts/guest-image, outside the hash.
# shellcheck shell=bash

# What a stock cloud image lacks: the provider's vendor scripts install these at first boot.
STOCK_MISSING=(squid qemu-guest-agent)

# Disk layout (512-byte sectors). Root last so that a grown disk can grow it.
DISK_SIZE=3G
BIOS_PART=14 BIOS_START=2048 BIOS_END=4095      # BIOS boot partition (ef02), 1 MiB
ESP_PART=15 ESP_START=4096 ESP_END=69631        # EFI system partition (ef00), 32 MiB
ROOT_PART=1 ROOT_START=69632                    # root (8304) to the end of the disk
ROOT_LABEL=kvmp-root
ESP_LABEL=KVMP-ESP

# Kernel module folders a virtual machine never needs (keeps image and initramfs small).
PRUNE_MODULES=(sound drivers/gpu drivers/media drivers/net/wireless drivers/infiniband
  drivers/staging drivers/isdn drivers/bluetooth net/bluetooth net/wireless net/mac80211
  drivers/iio drivers/net/can net/can drivers/hwmon drivers/mtd drivers/scsi/lpfc
  drivers/scsi/qla2xxx drivers/scsi/qla4xxx drivers/scsi/mpt3sas drivers/scsi/megaraid
  drivers/scsi/bfa drivers/scsi/be2iscsi drivers/scsi/csiostor drivers/scsi/qedf
  drivers/scsi/qedi drivers/scsi/smartpqi drivers/net/ethernet/mellanox
  drivers/net/ethernet/chelsio drivers/net/ethernet/qlogic drivers/net/ethernet/broadcom
  drivers/net/ethernet/sfc drivers/net/ethernet/netronome drivers/net/ethernet/cavium
  drivers/net/ethernet/huawei drivers/net/ethernet/marvell drivers/net/ethernet/pensando
  drivers/net/ethernet/emulex drivers/net/ethernet/amazon drivers/net/ethernet/microsoft)

HOST_PACKAGES=(debootstrap gdisk dosfstools mtools e2fsprogs qemu-utils grub-common
  grub-efi-amd64-bin grub-pc-bin)

# ---------------------------------------------------------------- host side

install_host_packages() {
  local missing=() p
  for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The Debian mirror this machine's apt uses (deb822 .sources or one-line .list),
# the first one serving $SUITE itself (not -security or -updates).
debian_mirror() {
  [[ -n ${KVMP_DEBIAN_MIRROR:-} ]] && {
    printf '%s\n' "$KVMP_DEBIAN_MIRROR"
    return
  }
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    uri=$(awk -v suite="$SUITE" '
      function flush() { if (!found && uris != "" && enabled && ok && deb) { split(uris, u, " "); print u[1]; found = 1 } uris = ""; enabled = 1; ok = 0; deb = 0 }
      BEGIN { enabled = 1 }
      /^[[:space:]]*$/ { flush(); next }
      /^[[:space:]]*#/ { next }
      tolower($1) == "uris:" { $1 = ""; uris = $0 }
      tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
      END { flush() }' "$f")
    [[ -n $uri ]] && {
      printf '%s\n' "$uri"
      return
    }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    uri=$(awk -v suite="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "$f")
    [[ -n $uri ]] && {
      printf '%s\n' "$uri"
      return
    }
  done
  # No source names this release (a newer one than the machine's own): the
  # machine's Debian mirror serves every release under the same URI.
  if [[ $SUITE != "$(. /etc/os-release && printf '%s' "$VERSION_CODENAME")" ]]; then
    SUITE=$(. /etc/os-release && printf '%s' "$VERSION_CODENAME") debian_mirror
    return
  fi
  die "no apt source for $SUITE in /etc/apt/sources.list{,.d}"
}

# ---------------------------------------------------------------- build

BUILD_TMP=
ROOTFS=
MOUNTS=()
LOG_FILE=

cleanup() {
  local status=$? i m pid
  set +e
  # Mounts first (ours, then anything a killed debootstrap left), so the
  # removal below can never reach into /proc, /sys or /dev of this machine.
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}"; done
  if [[ -n $BUILD_TMP && -d $BUILD_TMP ]]; then
    for pid in /proc/[0-9]*; do
      [[ $(readlink "$pid/root" 2>/dev/null) == "$BUILD_TMP"/* ]] && kill "${pid#/proc/}" 2>/dev/null
    done
    while read -r m; do umount -l "$m" 2>/dev/null; done < <(awk -v d="$BUILD_TMP/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    rm -rf --one-file-system "$BUILD_TMP"
  fi
  if ((status != 0)) && [[ -n $LOG_FILE && -f $LOG_FILE ]]; then
    log "build failed; last lines of $LOG_FILE:"
    tail -n 25 "$LOG_FILE" >&2
  fi
  exit "$status"
}

# Runs a command with its output in the build log, at low priority (the machine is shared).
run() { nice -n 10 "$@" >>"$LOG_FILE" 2>&1; }

# Runs a command inside the root (chroot), logged and at low priority.
run_in_root() {
  run chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

mount_in_root() { # type target
  mount -t "$1" "kvmp-$1" "$ROOTFS$2"
  MOUNTS+=("$ROOTFS$2")
}

STEP_T0=
step() {
  local now
  now=$(date +%s.%N)
  [[ -n $STEP_T0 ]] && log "  $(awk -v a="$STEP_T0" -v b="$now" 'BEGIN { printf "%.1f", b - a }') s"
  STEP_T0=$now
  [[ -n ${1:-} ]] && {
    log "$1"
    printf '\n== %s\n' "$1" >>"$LOG_FILE"
  }
  return 0
}

le_bytes() { # value count: printf escapes of a little-endian integer
  local v=$1 n=$2 i
  for ((i = 0; i < n; i++)); do printf '\\x%02x' $(((v >> (8 * i)) & 255)); done
}
patch_bytes() { # file offset escapes
  # shellcheck disable=SC2059
  printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
read_hex() { od -An -tx1 -v -j "$2" -N "$3" "$1" | tr -d ' \n'; }

packages() {
  local skip
  skip=$([[ $VARIANT == stock ]] && printf '%s\n' "${STOCK_MISSING[@]}")
  grep -v '^[[:space:]]*\(#\|$\)' "$RECIPE_DIR/packages" | grep -vxF -e "${skip:-@none@}" | paste -sd, -
}

build_rootfs() {
  local mirror=$1 f kver
  step "debootstrap $SUITE from $mirror (minbase)"
  mkdir -p "$IMAGES/debootstrap-cache"
  run debootstrap --variant=minbase --components=main --cache-dir="$IMAGES/debootstrap-cache" \
    --include="$(packages)" "$SUITE" "$ROOTFS" "$mirror"
  if awk -v d="$ROOTFS/" 'index($5, d) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    die "debootstrap left mounts under $ROOTFS"
  fi

  step "configure the root"
  (cd "$RECIPE_DIR/rootfs" && find . -type f) | while read -r f; do
    install -D -o root -g root -m "$(stat -c %a "$RECIPE_DIR/rootfs/$f")" "$RECIPE_DIR/rootfs/$f" "$ROOTFS/${f#./}"
  done
  # Fresh identity on first boot: systemd makes a machine-id, DHCP gives names.
  : >"$ROOTFS/etc/machine-id"
  rm -f "$ROOTFS/var/lib/dbus/machine-id"
  # debootstrap copied this machine's resolver; systemd-resolved's package
  # normally replaced it with a link to its stub. Never ship the build host's.
  if [[ ! -L $ROOTFS/etc/resolv.conf ]]; then : >"$ROOTFS/etc/resolv.conf"; fi
  run_in_root systemctl enable systemd-networkd.service systemd-resolved.service
  if [[ $VARIANT == test ]]; then
    printf 'deb %s %s main\n' "$mirror" "$SUITE" >"$ROOTFS/etc/apt/sources.list"
    # qemu-guest-agent has no [Install] section: udev starts it when the
    # org.qemu.guest_agent.0 port appears. Make sure nothing masks it.
    [[ -f $ROOTFS/lib/systemd/system/qemu-guest-agent.service ]] || die "qemu-guest-agent.service missing"
    [[ ! -L $ROOTFS/etc/systemd/system/qemu-guest-agent.service ]] || die "qemu-guest-agent is masked"
    grep -q '^include /etc/squid/conf.d/\*' "$ROOTFS/etc/squid/squid.conf" ||
      die "squid.conf does not include /etc/squid/conf.d"
    # e2scrub_reap (lvm scans for stale e2scrub snapshots; a VM has none) took
    # 22 s of a first boot's one vCPU under TCG: the tests' guests skip it.
    run_in_root systemctl mask e2scrub_reap.service
  else
    # A genericcloud image's sources: deb822, the public mirrors, no sources.list.
    rm -rf "$ROOTFS/etc/squid" "$ROOTFS/etc/apt/sources.list"
    mkdir -p "$ROOTFS/etc/apt/sources.list.d"
    cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    local p
    for p in "${STOCK_MISSING[@]}"; do
      ! chroot "$ROOTFS" dpkg-query -W "$p" >/dev/null 2>&1 || die "the stock variant has $p"
    done
  fi

  step "slim the kernel modules and rebuild the initramfs"
  kver=$(basename "$(ls -d "$ROOTFS"/lib/modules/*)")
  for f in "${PRUNE_MODULES[@]}"; do rm -rf "$ROOTFS/lib/modules/$kver/kernel/$f"; done
  mount_in_root proc /proc
  run_in_root depmod -a "$kver"
  run_in_root update-initramfs -u -k "$kver"
  umount "$ROOTFS/proc" && unset 'MOUNTS[-1]'

  step "remove caches, documentation and logs"
  run_in_root apt-get clean
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/debconf/*-old \
    "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/lintian/* \
    "$ROOTFS"/var/log/bootstrap.log "$ROOTFS"/var/log/apt/* "$ROOTFS"/var/log/dpkg.log \
    "$ROOTFS"/var/lib/dpkg/*-old "$ROOTFS"/boot/*.old-dkms "$ROOTFS"/tmp/* "$ROOTFS"/var/tmp/*
  find "$ROOTFS/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$ROOTFS/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  find "$ROOTFS/var/log" -type f -exec truncate -s 0 {} +
  cp "$ROOTFS/var/lib/dpkg/status" "$BUILD_TMP/dpkg-status"
}

# The kernel and initrd as GRUB should load them (the symlinks Debian keeps in /).
boot_file() { # vmlinuz|initrd.img
  local f
  if [[ -L $ROOTFS/$1 && -f $ROOTFS/$1 ]]; then
    printf '%s' "$1"
  else
    f=$(cd "$ROOTFS" && ls -1 boot/"$1"-* 2>/dev/null | sort -V | tail -n1)
    [[ -n $f ]] || die "no /boot/$1-* in the root"
    printf '%s' "$f"
  fi
}

grub_config() { # serial(0|1) output
  local serial=''
  ((${1})) && serial=$'serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console'
  local cfg
  cfg=$(grep -v '^[[:space:]]*#' "$RECIPE_DIR/grub.cfg")
  cfg=${cfg//@SERIAL@/$serial}
  cfg=${cfg//@LABEL@/$ROOT_LABEL}
  cfg=${cfg//@KERNEL@/$(boot_file vmlinuz)}
  cfg=${cfg//@INITRD@/$(boot_file initrd.img)}
  printf '%s\n' "$cfg" >"$2"
}

build_disk() {
  local dir=$BUILD_TMP disk=$BUILD_TMP/disk.raw root_end root_sectors core_sectors want got
  step "boot loaders (grub-mkimage: x86_64-efi, i386-pc)"
  grub_config 0 "$dir/grub-efi.cfg"
  grub_config 1 "$dir/grub-bios.cfg"
  cat "$dir/grub-efi.cfg" >>"$LOG_FILE"
  run grub-mkimage -O x86_64-efi -o "$dir/BOOTX64.EFI" -c "$dir/grub-efi.cfg" -p /boot/grub \
    part_gpt ext2 search search_label linux echo
  run grub-mkimage -O i386-pc -o "$dir/core.img" -c "$dir/grub-bios.cfg" -p /boot/grub \
    biosdisk part_gpt ext2 search search_label linux echo serial terminal
  cp /usr/lib/grub/i386-pc/boot.img "$dir/boot.img"

  step "disk: GPT, ESP (FAT), root (ext4 from the folder), BIOS boot code"
  truncate -s "$DISK_SIZE" "$disk"
  run sgdisk -o \
    -n "$BIOS_PART:$BIOS_START:$BIOS_END" -t "$BIOS_PART:ef02" -c "$BIOS_PART:bios" \
    -n "$ESP_PART:$ESP_START:$ESP_END" -t "$ESP_PART:ef00" -c "$ESP_PART:esp" \
    -n "$ROOT_PART:$ROOT_START:0" -t "$ROOT_PART:8304" -c "$ROOT_PART:root" "$disk"
  root_end=$(sgdisk -i "$ROOT_PART" "$disk" | awk '/^Last sector:/ { print $3 }')
  [[ $root_end =~ ^[0-9]+$ ]] || die "cannot read the root partition's end from sgdisk"
  root_sectors=$((root_end - ROOT_START + 1))

  # ESP: FAT with the UEFI removable-media path, which firmware boots without NVRAM entries.
  run mkfs.vfat -C -n "$ESP_LABEL" "$dir/esp.img" $(((ESP_END - ESP_START + 1) / 2))
  run mmd -i "$dir/esp.img" ::/EFI ::/EFI/BOOT
  run mcopy -i "$dir/esp.img" "$dir/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
  run dd if="$dir/esp.img" of="$disk" bs=1M oflag=seek_bytes seek=$((ESP_START * 512)) conv=notrunc,sparse

  # Root: ext4 populated from the folder (owners, modes, links, xattrs kept).
  truncate -s $((root_sectors * 512)) "$dir/root.img"
  run mke2fs -F -t ext4 -L "$ROOT_LABEL" -d "$ROOTFS" "$dir/root.img"
  run dd if="$dir/root.img" of="$disk" bs=1M oflag=seek_bytes seek=$((ROOT_START * 512)) conv=notrunc,sparse
  rm -f "$dir/root.img"

  # BIOS, as grub-bios-setup would: core.img into the BIOS boot partition. Its
  # first sector (diskboot) ends with a blocklist {u64 start, u16 len, u16 seg}
  # naming the sectors that hold the rest; grub-mkimage filled len and seg.
  core_sectors=$((($(stat -c %s "$dir/core.img") + 511) / 512))
  ((core_sectors <= BIOS_END - BIOS_START + 1)) || die "core.img ($core_sectors sectors) does not fit the BIOS boot partition"
  want="0200000000000000$(le_bytes $((core_sectors - 1)) 2 | sed 's/\\x//g')2008"
  got=$(read_hex "$dir/core.img" 500 12)
  [[ $got == "$want" ]] || die "unexpected blocklist in core.img ($got, expected $want): GRUB layout changed"
  patch_bytes "$dir/core.img" 500 "$(le_bytes $((BIOS_START + 1)) 8)"
  # boot.img: the LBA of core.img's first sector at 0x5c; the boot-drive check
  # jump at 0x66 replaced by two NOPs (hard disk install, as grub-bios-setup does).
  [[ $(read_hex "$dir/boot.img" $((0x5c)) 8) == 0100000000000000 && $(read_hex "$dir/boot.img" $((0x64)) 4) == fffaeb05 ]] ||
    die "unexpected boot.img layout: GRUB changed"
  patch_bytes "$dir/boot.img" $((0x5c)) "$(le_bytes "$BIOS_START" 8)"
  patch_bytes "$dir/boot.img" $((0x66)) '\x90\x90'
  # Only the code area (0..0x1b7): the disk signature and the protective MBR's
  # partition table sgdisk wrote stay.
  run dd if="$dir/boot.img" of="$disk" bs=440 count=1 conv=notrunc
  run dd if="$dir/core.img" of="$disk" bs=512 seek="$BIOS_START" conv=notrunc
  run sgdisk -v "$disk"

  step "qcow2 (compressed)"
  run qemu-img convert -c -O qcow2 -o compat=1.1 "$disk" "$dir/image.qcow2"
  rm -f "$disk"
}

build() {
  local hash=$1 out mirror t0
  out=$(image_path "$hash")
  t0=$(date +%s)
  install_host_packages
  mirror=$(debian_mirror)
  mkdir -p "$IMAGES"
  BUILD_TMP=$(mktemp -d "$IMAGES/.build-$hash.XXXXXX")
  ROOTFS=$BUILD_TMP/root
  LOG_FILE=${out%.qcow2}.log
  : >"$LOG_FILE"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  log "building $out (log: $LOG_FILE)"
  build_rootfs "$mirror"
  build_disk
  step ""
  # Atomic: a file at $out is always a complete image (its dpkg status first).
  cp "$BUILD_TMP/dpkg-status" "$out.dpkg-status"
  mv -f "$BUILD_TMP/image.qcow2" "$out"
  if [[ $VARIANT == test && $SUITE == bookworm ]]; then
    ln -sfn "$(basename "$out")" "$IMAGES/.kvmp-guest.qcow2.tmp"
    mv -fT "$IMAGES/.kvmp-guest.qcow2.tmp" "$IMAGES/kvmp-guest.qcow2"
  fi
  log "built $out ($(du -m "$out" | cut -f1) MiB, $(($(date +%s) - t0)) s)"
}
