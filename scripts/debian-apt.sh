# shellcheck shell=bash
# Sourced by scripts/libblkio-reference.sh and scripts/fio-libblkio.sh: a
# private apt state for fetching Debian packages and sources without touching
# the host's apt configuration (no sources.list.d entry, no dpkg status).
# Needs $cache. Defines apt_opts, debian_apt_update, debian_apt_suites and
# sort_debian_versions.
#
# SPDX-License-Identifier: MIT OR Apache-2.0

apt_dir=${cache:?}/apt-blkio
apt_opts=(
  -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/nonexistent
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root
  -o Acquire::Languages=none
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false
)

# fio's source from sid and trixie (archive versions move: a version the
# lists name may already be gone from the pool); libblkio's binary packages
# from trixie and bookworm-backports.
debian_apt_sources() {
  cat <<'EOF'
deb-src http://deb.debian.org/debian sid main
deb-src http://deb.debian.org/debian trixie main
deb http://deb.debian.org/debian trixie main
deb http://deb.debian.org/debian bookworm-backports main
EOF
}

debian_apt_suites() { debian_apt_sources | awk '{print $1 " " $3}' | paste -sd, -; }

# Refreshes the private lists when they are older than a day or the sources
# changed; stale lists are used when the network is down.
debian_apt_update() {
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  [ -e "$apt_dir/status" ] || : > "$apt_dir/status"
  local want
  want=$(debian_apt_sources)
  if [ "$(cat "$apt_dir/sources.list" 2>/dev/null)" != "$want" ]; then
    echo "$want" > "$apt_dir/sources.list"
    rm -f "$apt_dir"/lists/*_Packages* "$apt_dir"/lists/*_Sources*
  fi
  if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*_Sources*' -mmin -1440 2>/dev/null)" ]; then
    echo "apt: updating private lists in $apt_dir ($(debian_apt_suites))" >&2
    if ! apt-get -qq "${apt_opts[@]}" update >&2; then
      [ -n "$(find "$apt_dir/lists" -maxdepth 1 -name '*_Sources*')" ] || return 1
      echo "apt: update failed; using the lists we have" >&2
    fi
  fi
}

# Reads Debian versions, one a line; prints them unique, newest first.
sort_debian_versions() {
  local sorted=() v i j
  while read -r v; do
    [ -n "$v" ] || continue
    for i in "${sorted[@]}"; do [ "$i" = "$v" ] && continue 2; done
    sorted+=("$v")
    for ((i = ${#sorted[@]} - 1; i > 0; i--)); do
      j=$((i - 1))
      dpkg --compare-versions "${sorted[$i]}" gt "${sorted[$j]}" || break
      v=${sorted[$i]}
      sorted[i]=${sorted[$j]}
      sorted[j]=$v
    done
  done
  [ ${#sorted[@]} -eq 0 ] || printf '%s\n' "${sorted[@]}"
}
