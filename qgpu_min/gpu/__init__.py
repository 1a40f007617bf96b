"""The GPU compiled into the weights: the machine of qgpu_min.machine built from qgpu_min.circuit parts.

datapath.py  one lane's execution of a block (operand routing, ALU slots, memory address and data,
             branch condition) as a circuit
encode.py    a machine block -> the datapath's fields (operands by source, the write-back list)
"""
