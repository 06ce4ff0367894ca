set -e
nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -DNDEBUG --expt-relaxed-constexpr -Ibindings -Ibindings/include -cubin -o /tmp/mul.cubin tmp_sass/a.cu
cuobjdump -sass /tmp/mul.cubin > $OUT/mul.sass
n=$(grep -n "FFMA" $OUT/mul.sass | sed -n 288p | cut -d: -f1)
echo "== mul (to the 288th FFMA)"; head -$n $OUT/mul.sass | grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+' | awk '{print $2}' | sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -12
