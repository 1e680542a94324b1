;;; lint.el --- checkdoc and package-lint for forj's Elisp, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `make lint-el' on the files named on the command line.  Exits
;; non-zero if checkdoc or package-lint has anything to say, except for
;; one known false warning of older package-lint releases (see below),
;; or if one of forj's own rules is broken:
;;
;; - Private names stay in their file.  The private prefix of
;;   forj-foo.el is `forj-foo--': only forj-foo.el may define or use a
;;   symbol that starts with it.  A file that needs another's private
;;   name asks that file for a public one.  Strings and comments are not
;;   read, so a docstring may still name a private symbol.  The test
;;   files (test-el/) are not checked: a test may look inside the file
;;   it tests.
;; - No `require' cycles: the files' top-level requires (and those in
;;   `eval-when-compile' and `eval-and-compile') form no cycle.  A
;;   require inside a function loads on first use and is not counted.

;;; Code:

(require 'checkdoc)
(require 'cl-lib)
(require 'subr-x)

(defvar forj-lint--failed nil
  "Non-nil once any check has failed.")

(defun forj-lint--checkdoc (file)
  "Run checkdoc on FILE; print and record any complaint."
  (with-current-buffer (find-file-noselect file)
    (let ((checkdoc-diagnostic-buffer "*forj-checkdoc*"))
      (when (get-buffer checkdoc-diagnostic-buffer)
        (kill-buffer checkdoc-diagnostic-buffer))
      (checkdoc-current-buffer t)
      (with-current-buffer (get-buffer-create checkdoc-diagnostic-buffer)
        (dolist (line (split-string (buffer-string) "\n" t))
          (when (string-match-p ":[0-9]+: " line)
            (setq forj-lint--failed t)
            (message "checkdoc: %s" line)))))))

(defun forj-lint--package-lint (files)
  "Run package-lint on FILES if it is installed; print and record complaints."
  (let ((dir (car (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/package-lint-[0-9]*"))))
    (when dir (add-to-list 'load-path dir)))
  (if (not (require 'package-lint nil t))
      (message "package-lint is not installed; skipped")
    (setq package-lint-main-file (expand-file-name (car files)))
    (dolist (file files)
      (with-current-buffer (find-file-noselect file)
        (dolist (issue (package-lint-buffer))
          (let ((text (nth 3 issue)))
            ;; Releases of package-lint older than Emacs 28 do not know
            ;; 28.1 exists and call Package-Requires: ((emacs "28.1"))
            ;; uninstallable.
            ;; And forj has no public home page yet to name in a URL
            ;; header; inventing one would be worse than the warning.
            (unless (or (string-match-p "uninstallable in all released Emacs versions" text)
                        (string-match-p "should have a Homepage or URL header" text))
              (setq forj-lint--failed t)
              (message "package-lint: %s:%s:%s: %s: %s"
                       file (nth 0 issue) (nth 1 issue) (nth 2 issue) text))))))))

(defun forj-lint--forms (file)
  "The top-level forms of FILE, read as data."
  (with-temp-buffer
    (insert-file-contents file)
    (goto-char (point-min))
    (let ((forms nil))
      (condition-case nil
          (while t (push (read (current-buffer)) forms))
        (end-of-file nil))
      (nreverse forms))))

(defun forj-lint--symbols (form table)
  "Add every symbol in FORM (conses, vectors, quoted or not) to TABLE."
  (cond ((symbolp form) (puthash form t table))
        ((consp form)
         (while (consp form)
           (forj-lint--symbols (car form) table)
           (setq form (cdr form)))
         (when form (forj-lint--symbols form table)))
        ((vectorp form) (mapc (lambda (f) (forj-lint--symbols f table)) form))))

(defun forj-lint--owner (symbol)
  "The file base name whose private prefix SYMBOL has, or nil.
`forj-foo--bar' is forj-foo.el's: its name up to the first \"--\"."
  (let ((name (symbol-name symbol)))
    (and (string-match "\\`\\(forj\\(?:-[[:alnum:]]+\\)*?\\)--" name)
         (match-string 1 name))))

(defconst forj-lint--definers
  '(defun defmacro defsubst defvar defvar-local defconst defcustom defface defalias
    define-derived-mode define-minor-mode cl-defun cl-defmacro cl-defgeneric cl-defmethod)
  "Forms whose second element is the name they define.")

(defun forj-lint--private-names (files)
  "Report each symbol of FILES with another file's private prefix.
Also each private name a file defines with a prefix not its own."
  (let ((bases (mapcar #'file-name-base files)))
    (dolist (file files)
      (let ((self (file-name-base file))
            (used (make-hash-table :test #'eq))
            (forms (forj-lint--forms file)))
        (dolist (form forms)
          (forj-lint--symbols form used)
          (when (and (consp form) (memq (car form) forj-lint--definers))
            (let* ((name (cadr form))
                   (name (if (eq (car-safe name) 'quote) (cadr name) name))
                   (owner (and (symbolp name) (forj-lint--owner name))))
              (when (and owner (not (equal owner self)) (not (member owner bases)))
                (setq forj-lint--failed t)
                (message "private-names: %s defines `%s', private to %s.el, which is not %s"
                         file name owner (file-name-nondirectory file))))))
        (let ((found nil))
          (maphash (lambda (symbol _)
                     (let ((owner (forj-lint--owner symbol)))
                       (when (and owner (not (equal owner self)) (member owner bases))
                         (push symbol found))))
                   used)
          (dolist (symbol (sort found (lambda (a b) (string< a b))))
            (setq forj-lint--failed t)
            (message "private-names: %s uses `%s', private to %s.el; give it a public name there"
                     file symbol (forj-lint--owner symbol))))))))

(defun forj-lint--requires (form)
  "The features FORM requires as it loads: a top-level `require', or one
inside `eval-when-compile', `eval-and-compile' or `progn'."
  (pcase form
    (`(require (quote ,feature) . ,_) (list feature))
    (`(,(or 'eval-when-compile 'eval-and-compile 'progn) . ,body)
     (apply #'append (mapcar #'forj-lint--requires body)))))

(defun forj-lint--require-cycles (files)
  "Report each `require' cycle among FILES."
  (let* ((bases (mapcar #'file-name-base files))
         (graph (mapcar (lambda (file)
                          (cons (file-name-base file)
                                (cl-remove-if-not
                                 (lambda (feature) (member feature bases))
                                 (mapcar #'symbol-name
                                         (apply #'append (mapcar #'forj-lint--requires
                                                                 (forj-lint--forms file)))))))
                        files))
         (done nil)
         (reported nil))
    (cl-labels ((visit (node path)
                  (cond
                   ((member node path)
                    (let* ((cycle (reverse (cl-subseq path 0 (1+ (cl-position node path :test #'equal)))))
                           (key (sort (copy-sequence cycle) #'string<)))
                      (unless (member key reported)
                        (push key reported)
                        (setq forj-lint--failed t)
                        (message "require-cycles: %s"
                                 (mapconcat #'identity (append cycle (list node)) " requires ")))))
                   ((member node done))
                   (t (dolist (next (cdr (assoc node graph)))
                        (visit next (cons node path)))
                      (push node done)))))
      (dolist (base bases) (visit base nil)))))

(let ((files command-line-args-left))
  (setq command-line-args-left nil)
  (forj-lint--private-names files)
  (forj-lint--require-cycles files)
  (dolist (file files) (forj-lint--checkdoc file))
  (forj-lint--package-lint files)
  (kill-emacs (if forj-lint--failed 1 0)))

;;; lint.el ends here
