# shellcheck shell=sh
# Mount helpers sourced by the namespace test scripts (they run inside `unshare -m`, so nothing
# here changes the host's mounts).
#
#   usr_local_vgpu STASH
#
# Makes a mount point /usr/local/vgpu without creating it on the host: /usr/local is bound to
# STASH (a directory of the test), replaced by a tmpfs, and its entries are bound back.
#
#   private_tmp OPTS PATH...
#
# Mounts a fresh tmpfs on /tmp (tmpfs mount options OPTS, e.g. "mode=1777" or "ro"), so that
# nothing of the host's /tmp answers for the test, while every PATH that lies under /tmp (the
# test's own files: a checkout under /tmp, its target dir) stays reachable at the same path: its
# top-level directory is stashed on a private tmpfs at /mnt, then bound back in (with its
# submounts) before OPTS take effect.
private_tmp() {
    opts=$1
    shift
    tops=""
    for p in "$@"; do
        case $p in
            /tmp/?*)
                rest=${p#/tmp/}
                top=/tmp/${rest%%/*}
                case " $tops " in *" $top "*) ;; *) tops="$tops $top" ;; esac
                ;;
        esac
    done
    if [ -z "$tops" ]; then
        mount -t tmpfs -o "$opts" tmpfs /tmp
        return
    fi
    mount -t tmpfs -o mode=0700 tmpfs /mnt
    i=0
    for top in $tops; do
        i=$((i + 1))
        mkdir "/mnt/keep$i"
        mount --rbind "$top" "/mnt/keep$i"
    done
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    i=0
    for top in $tops; do
        i=$((i + 1))
        mkdir -p "$top"
        mount --rbind "/mnt/keep$i" "$top"
    done
    mount -o "remount,$opts" /tmp
}

usr_local_vgpu() {
    [ -d /usr/local/vgpu ] && return
    stash=$1
    mkdir -p "$stash"
    mount --bind /usr/local "$stash"
    mount -t tmpfs -o mode=0755 tmpfs /usr/local
    for e in "$stash"/* "$stash"/.[!.]*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        n=${e##*/}
        if [ -L "$e" ]; then
            cp -P "$e" "/usr/local/$n"
        elif [ -d "$e" ]; then
            mkdir "/usr/local/$n"
            mount --rbind "$e" "/usr/local/$n"
        else
            : >"/usr/local/$n"
            mount --bind "$e" "/usr/local/$n"
        fi
    done
    mkdir /usr/local/vgpu
}
