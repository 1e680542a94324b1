;;; forj-diagnostics.el --- The editor's diagnostics, told to the model  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; What the user's checkers (flymake, with eglot's language server as
;; one of its backends, and flycheck when it is installed) say of the
;; files the model edits.
;;
;; After a batch that changed files, each changed file open in a buffer
;; with a checker on is checked again, and the new errors and warnings
;; of the region the batch changed go with the call's result, under
;; `editor_diagnostics', so the model fixes what the checker sees.  The
;; wait is bounded (`forj-diagnostics-wait-seconds') and runs on timers:
;; Emacs never blocks.  A file that is not open, or open with no
;; checker, is left alone: forj opens no file to check it.
;;
;; The `diagnostics' tool is the worker's (its rules, review and journal
;; apply); at execute time the worker asks Emacs, and
;; `forj-diagnostics-answer' answers with the file's current diagnostics.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-files)
(require 'forj-tools)
(require 'forj-worker)

(declare-function flymake-start "flymake" (&optional deferred force))
(declare-function flymake-running-backends "flymake" ())
(declare-function flymake-reporting-backends "flymake" ())
(declare-function flymake-diagnostics "flymake" (&optional beg end))
(declare-function flymake-diagnostic-beg "flymake" (diag))
(declare-function flymake-diagnostic-type "flymake" (diag))
(declare-function flymake-diagnostic-text "flymake" (diag))
(declare-function flymake-diagnostic-backend "flymake" (diag))
(declare-function flycheck-buffer "ext:flycheck" ())
(declare-function flycheck-running-p "ext:flycheck" ())
(declare-function flycheck-error-line "ext:flycheck" (err))
(declare-function flycheck-error-column "ext:flycheck" (err))
(declare-function flycheck-error-level "ext:flycheck" (err))
(declare-function flycheck-error-message "ext:flycheck" (err))
(declare-function flycheck-error-checker "ext:flycheck" (err))
(defvar flycheck-current-errors)
(defvar flymake-mode)
(defvar flycheck-mode)

(defcustom forj-diagnostics-after-edits t
  "Non-nil: after an edit, tell the model what the file's checker says.
Only files open in a buffer with flymake or flycheck on are checked;
the new errors and warnings of the changed region go with the result."
  :type 'boolean
  :group 'forj)

(defcustom forj-diagnostics-wait-seconds 3
  "How long forj waits for a checker after an edit, or for the tool.
A checker that has not finished by then is reported as not finished;
the model is resumed anyway."
  :type 'number
  :group 'forj)

(defcustom forj-diagnostics-max 30
  "The most diagnostics of one file the model is told at a time."
  :type 'natnum
  :group 'forj)

;;; Which checker, and what it says

(defun forj-diagnostics-checker (buffer)
  "The checker on in BUFFER: `flymake', `flycheck' or nil."
  (with-current-buffer buffer
    (cond ((and (bound-and-true-p flymake-mode) (flymake-running-backends)) 'flymake)
          ((bound-and-true-p flycheck-mode) 'flycheck))))

(defun forj-diagnostics--severity (type)
  "The severity name of a flymake diagnostic TYPE (eglot's too)."
  (pcase (or (get type 'flymake-category) type)
    ((or 'flymake-error :error) "error")
    ((or 'flymake-warning :warning) "warning")
    (_ "note")))

(defun forj-diagnostics--flymake ()
  "The current buffer's flymake diagnostics, as plists, in buffer order."
  (let ((diags (sort (flymake-diagnostics) (lambda (a b) (< (flymake-diagnostic-beg a)
                                                            (flymake-diagnostic-beg b))))))
    (save-excursion
      (save-restriction
        (widen)
        (mapcar (lambda (d)
                  (goto-char (flymake-diagnostic-beg d))
                  (list :line (line-number-at-pos) :column (current-column)
                        :severity (forj-diagnostics--severity (flymake-diagnostic-type d))
                        :message (substring-no-properties (flymake-diagnostic-text d))
                        :source (format "%s" (flymake-diagnostic-backend d))))
                diags)))))

(defun forj-diagnostics--flycheck ()
  "The current buffer's flycheck errors, as plists."
  (mapcar (lambda (e)
            (list :line (or (flycheck-error-line e) 1)
                  :column (max 0 (1- (or (flycheck-error-column e) 1)))
                  :severity (pcase (flycheck-error-level e)
                              ('error "error") ('warning "warning") (_ "note"))
                  :message (or (flycheck-error-message e) "")
                  :source (format "%s" (flycheck-error-checker e))))
          flycheck-current-errors))

(defun forj-diagnostics--done-p (checker)
  "Non-nil when CHECKER has reported on the current buffer's text."
  (pcase checker
    ('flymake (null (cl-set-difference (flymake-running-backends) (flymake-reporting-backends))))
    ('flycheck (not (flycheck-running-p)))))

(defun forj-diagnostics--server-said ()
  "What eglot's language server last said of the current buffer, or `none'.
Eglot's flymake backend reports at once what the server said last, of
the text before the edit; a new value here is the server's word on the
new text."
  (if (and (bound-and-true-p eglot--managed-mode) (boundp 'eglot--diagnostics))
      (symbol-value 'eglot--diagnostics)
    'none))

(defun forj-diagnostics-check (buffer then)
  "Check BUFFER afresh; call THEN with its diagnostics, or with `timeout'.
THEN gets a list of plists (:line :column :severity :message
:source), or the symbol `timeout' when the checker did not finish in
`forj-diagnostics-wait-seconds'.  Nothing waits: timers poll."
  (let ((checker (forj-diagnostics-checker buffer))
        (deadline (+ (float-time) forj-diagnostics-wait-seconds))
        (said (with-current-buffer buffer (forj-diagnostics--server-said))))
    (with-current-buffer buffer
      (pcase checker
        ('flymake (flymake-start nil t))
        ('flycheck (flycheck-buffer))))
    (cl-labels ((poll ()
                  (cond
                   ((not (buffer-live-p buffer)) (funcall then nil))
                   ((with-current-buffer buffer
                      (and (forj-diagnostics--done-p checker)
                           ;; A language server: once it spoke of the new text.
                           (or (eq said 'none) (not (eq said (forj-diagnostics--server-said))))))
                    (funcall then (with-current-buffer buffer
                                    (if (eq checker 'flymake)
                                        (forj-diagnostics--flymake)
                                      (forj-diagnostics--flycheck)))))
                   ((> (float-time) deadline) (funcall then 'timeout))
                   (t (run-at-time 0.05 nil #'poll)))))
      (run-at-time 0.05 nil #'poll))))

(defun forj-diagnostics--clean (text limit)
  "TEXT without control characters (but newlines and tabs), at most LIMIT long."
  (let ((text (replace-regexp-in-string "[\0-\10\13-\37\177]" "" (or text "") t t)))
    (if (> (length text) limit) (concat (substring text 0 limit) "…") text)))

(defun forj-diagnostics--wire (diag)
  "Return DIAG in the form the model is given.
A checker's message is text about the model's code, which may quote
it: control characters go, and it is cut at 1000 characters."
  (list :line (plist-get diag :line) :column (plist-get diag :column)
        :severity (plist-get diag :severity)
        :message (forj-diagnostics--clean (plist-get diag :message) 1000)
        :source (forj-diagnostics--clean (plist-get diag :source) 200)))

;;; After an edit

(defun forj-diagnostics-snapshot (entries root)
  "Return what the checkers now say of the files that ENTRIES may change.
ROOT is the project root.  An alist (FILE BUFFER TEXT KEYS): the
buffer's text and its diagnostics' (severity . message) before the
batch, for each such file open in a buffer with a checker on."
  (when (and forj-diagnostics-after-edits root)
    (let (snapshot)
      (dolist (entry entries)
        (dolist (path (forj-tools-call-paths (plist-get entry :call)))
          (let* ((file (forj-project-file path root))
                 (buffer (and file (find-buffer-visiting file))))
            (when (and buffer (not (assoc file snapshot)) (forj-diagnostics-checker buffer))
              (with-current-buffer buffer
                (push (list file buffer
                            (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))
                            (mapcar (lambda (d) (cons (plist-get d :severity) (plist-get d :message)))
                                    (if (eq (forj-diagnostics-checker buffer) 'flymake)
                                        (forj-diagnostics--flymake)
                                      (forj-diagnostics--flycheck))))
                      snapshot))))))
      snapshot)))

(defun forj-diagnostics--changed-lines (old new)
  "The first and last line of NEW that differ from OLD, as (FIRST . LAST), or nil."
  (let* ((prefix (let ((n (compare-strings old nil nil new nil nil)))
                   (if (eq n t) nil (1- (abs n))))))
    (when prefix
      (let* ((max (min (length old) (length new)))
             (suffix 0))
        (while (and (< suffix (- max prefix))
                    (eq (aref old (- (length old) suffix 1)) (aref new (- (length new) suffix 1))))
          (cl-incf suffix))
        ;; The last line is that of the last changed character (a pure
        ;; deletion: of the place it was).
        (let ((end (max prefix (1- (- (length new) suffix)))))
          (cons (1+ (cl-count ?\n new :end (min prefix (length new))))
                (1+ (cl-count ?\n new :end (min end (length new))))))))))

(defun forj-diagnostics--new (file snapshot diags)
  "The errors and warnings of DIAGS new since SNAPSHOT, in FILE's changed lines."
  (let* ((before (assoc file snapshot))
         (keys (nth 3 before))
         (lines (with-current-buffer (nth 1 before)
                  (forj-diagnostics--changed-lines
                   (nth 2 before)
                   (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))))))
    (when lines
      (cl-loop for d in diags
               when (and (member (plist-get d :severity) '("error" "warning"))
                         (<= (car lines) (plist-get d :line) (cdr lines))
                         (not (member (cons (plist-get d :severity) (plist-get d :message)) keys)))
               collect (forj-diagnostics--wire d)))))

(defun forj-diagnostics-after-batch (snapshot results root then)
  "Add to RESULTS what the checkers of SNAPSHOT now say; call THEN with them.
ROOT is the project root.  Each successful call that changed a file of
SNAPSHOT gets `:editor_diagnostics', a vector with one entry per
file: :path, :checker and :new, the errors and warnings of the
changed region the checker did not report before.  With nothing to
check, THEN is called at once."
  (let* ((results (copy-sequence results))
         ;; Each file is checked once, and told with the last call that
         ;; changed it: what the batch left is what the checker sees.
         (todo (and snapshot root
                    (let (found)
                      (cl-loop for result in results
                               for index from 0
                               do (dolist (path (forj-files-changed-by-result result))
                                    (let ((file (forj-project-file path root)))
                                      (when (and file (assoc file snapshot)
                                                 (buffer-live-p (nth 1 (assoc file snapshot))))
                                        (setq found (cons (list index path file)
                                                          (cl-remove file found :key #'cl-third
                                                                     :test #'equal)))))))
                      (nreverse found))))
         (waiting (length todo)))
    (if (zerop waiting)
        (funcall then results)
      (dolist (item todo)
        (let ((buffer (nth 1 (assoc (nth 2 item) snapshot))))
          (forj-diagnostics-check
           buffer
           (lambda (diags)
             (let* ((index (nth 0 item))
                    (checker (format "%s" (forj-diagnostics-checker buffer)))
                    (entry (if (eq diags 'timeout)
                               (list :path (nth 1 item) :checker checker :new []
                                     :note (format "the checker did not finish in %s s"
                                                   forj-diagnostics-wait-seconds))
                             (let ((new (forj-diagnostics--new (nth 2 item) snapshot diags)))
                               (list :path (nth 1 item) :checker checker
                                     :new (vconcat (seq-take new forj-diagnostics-max))))))
                    (result (copy-sequence (nth index results))))
               (setf (nth index results)
                     (plist-put result :editor_diagnostics
                                (vconcat (plist-get result :editor_diagnostics) (list entry))))
               (when (zerop (cl-decf waiting))
                 (funcall then results))))))))))

(defun forj-diagnostics-summary (results)
  "A sentence saying what the checkers told the model with RESULTS, or nil."
  (let ((parts (cl-loop for result in results
                        append (cl-loop for entry across (or (plist-get result :editor_diagnostics) [])
                                        for new = (length (plist-get entry :new))
                                        when (> new 0)
                                        collect (format "%d in %s" new (plist-get entry :path))))))
    (when parts
      (format "the checkers report new errors or warnings (%s); the model was told"
              (string-join parts ", ")))))

;;; The diagnostics tool: the worker asks

(defun forj-diagnostics-answer (worker body answer)
  "Answer WORKER's question BODY: the current diagnostics of a file.
BODY has :path, the file's true name, which the worker checked is in
the project.  ANSWER gets (:checker :diagnostics :note).  Return t."
  (let* ((path (plist-get body :path))
         (root (plist-get (forj-worker-hello worker) :root))
         (buffer (and (stringp path) (stringp root)
                      (file-in-directory-p path root)
                      (find-buffer-visiting path)))
         (checker (and buffer (forj-diagnostics-checker buffer))))
    (if (not checker)
        (funcall answer (list :checker :null :diagnostics []
                              :note (if buffer
                                        "the file is open in Emacs, but no checker (flymake or flycheck) is on in its buffer"
                                      "the file is not open in Emacs, so no checker runs on it")))
      (forj-diagnostics-check
       buffer
       (lambda (diags)
         (funcall answer
                  (if (eq diags 'timeout)
                      (list :checker (symbol-name checker) :diagnostics []
                            :note (format "the checker did not finish in %s s" forj-diagnostics-wait-seconds))
                    (list :checker (symbol-name checker)
                          :diagnostics (vconcat (mapcar #'forj-diagnostics--wire
                                                        (seq-take diags forj-diagnostics-max)))
                          :note (if (> (length diags) forj-diagnostics-max)
                                    (format "%d more not shown" (- (length diags) forj-diagnostics-max))
                                  ""))))))))
  t)

(provide 'forj-diagnostics)
;;; forj-diagnostics.el ends here
