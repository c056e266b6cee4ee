pub mod scan;
