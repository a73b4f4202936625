set terminal png size 1000,650
set output 'bench/results/sparse/plot.png'
set title 'clattn bench: sparse (median time per call)'
set logscale xy
set xlabel 'sequence length (Nq = Nk)'
set ylabel 'ms'
set grid
set key left top
set xtics (1024, 2048, 4096, 8192, 16384)
set autoscale xfix
set offsets graph 0.04, graph 0.04, 0, 0
plot 'bench/results/sparse/series-0.dat' using 1:2 with linespoints title 'fused full', \
     'bench/results/sparse/series-1.dat' using 1:2 with linespoints title 'fused causal', \
     'bench/results/sparse/series-2.dat' using 1:2 with linespoints title 'fused window:128,128', \
     'bench/results/sparse/series-3.dat' using 1:2 with linespoints title 'fused bigbird:64,3,2,3'
