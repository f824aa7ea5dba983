KERNEL_UNITS: tuple = ()
