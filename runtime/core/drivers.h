/*
 * The driver search (drivers.c): OpenCL drivers installed on the machine but not registered
 * with the ICD loader, handed to the loader before its first use. See "driver search" in
 * clattn.h for what is searched and how.
 */
#ifndef CLATTN_DRIVERS_H
#define CLATTN_DRIVERS_H

/* Runs the search once per process (later calls return at once), and, when it found a
 * driver, initialises the ICD loader with it. Device discovery calls it before its first
 * OpenCL call. Never fails: what it did is in clattn_driver_search_summary(). */
void drivers_prepare(void);

#endif /* CLATTN_DRIVERS_H */
