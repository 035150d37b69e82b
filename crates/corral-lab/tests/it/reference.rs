//! The statistics against a reference (scipy, statsmodels): filled in next.
