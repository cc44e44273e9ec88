# Shared by the benchmark scripts: sourced, defines functions only.

# median: the median of the numbers on stdin, one a line (the mean of the two
# middle ones for an even count)
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
