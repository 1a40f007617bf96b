// Loops with break and continue: the first position of each key in a table, and how many
// positive table entries come before it.
__global__ void find_key(const int* table, int len, const int* keys, int* pos, int* positives_before, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int key = keys[i], found = -1, count = 0;
    for (int j = 0; j < len; ++j) {
        if (table[j] == key) {
            found = j;
            break;
        }
        if (table[j] <= 0) continue;
        ++count;
    }
    pos[i] = found;
    positives_before[i] = count;
}
