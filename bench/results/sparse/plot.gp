set terminal png size 1000,650
set output 'bench/results/sparse/plot.png'
set title 'clattn bench: sparse, N=16384, H=4, D=64, bhsd (median time per call against density)'
set logscale xy
set xlabel 'density (allowed pairs / B*Hq*Nq*Nk)'
set ylabel 'ms'
set grid
set key right bottom
set xrange [*:1.5]
plot 'bench/results/sparse/series-0.dat' using 1:2 with linespoints title 'full', \
     'bench/results/sparse/series-1.dat' using 1:2 with linespoints title 'causal', \
     'bench/results/sparse/series-2.dat' using 1:2 with linespoints title 'window', \
     'bench/results/sparse/series-3.dat' using 1:2 with linespoints title 'dilated', \
     'bench/results/sparse/series-4.dat' using 1:2 with linespoints title 'longformer', \
     'bench/results/sparse/series-5.dat' using 1:2 with linespoints title 'bigbird', \
     'bench/results/sparse/series-6.dat' using 1:2 with linespoints title 'fixed', \
     'bench/results/sparse/series-7.dat' using 1:2 with linespoints title 'strided', \
     'bench/results/sparse/series-8.dat' using 1:2 with lines linecolor rgb 'gray40' dashtype 2 linewidth 3 title 'ideal: full''s ms x density'
