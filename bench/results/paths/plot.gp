set terminal png size 1000,650
set output 'bench/results/paths/plot.png'
set title 'clattn bench: paths (median time per call)'
set logscale xy
set xlabel 'sequence length (Nq = Nk)'
set ylabel 'ms'
set grid
set autoscale xfix
set offsets graph 0.04, graph 0.04, 0, 0
set xtics (512, 1024, 2048, 4096)
set key left top
plot 'bench/results/paths/series-0.dat' using 1:2 with linespoints title 'fused full', \
     'bench/results/paths/series-1.dat' using 1:2 with linespoints title 'gemm full', \
     'bench/results/paths/series-2.dat' using 1:2 with linespoints title 'host full', \
     'bench/results/paths/series-3.dat' using 1:2 with linespoints title 'fused causal', \
     'bench/results/paths/series-4.dat' using 1:2 with linespoints title 'gemm causal', \
     'bench/results/paths/series-5.dat' using 1:2 with linespoints title 'host causal'
