;;; forj-context.el --- What the user adds to a chat's context  -*- lexical-binding: t; -*-

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

;; `forj-add-context' adds a file, a buffer, the region or the marked
;; files of a Dired buffer to the chat of the project.  The chat lists
;; them at its top, each with its size and an estimate of its tokens,
;; and a [remove] button (`forj-context-remove' from the keyboard).
;; Every request carries them, before the conversation, in the
;; provider's best form: Anthropic document blocks, text parts that name
;; their source elsewhere.  A piece of context is the text as it was
;; when added; adding it again takes it anew.
;;
;; `forj-send-region' asks about the region of any buffer: the question
;; and the region go to the project's chat as one message.  `@' followed
;; by a path in the chat's input completes the project's files
;; (`completion-at-point'), and a file chosen there is added.
;;
;; Only the user adds context; the model never does.  Files are read by
;; the project's worker, through the same `read_file' call the model's
;; tools use: the worker keeps them inside the project, refuses files
;; its denied patterns match (.env, keys, ...), and redacts credentials.
;; A file outside the project is refused: open it and add its buffer.
;; A buffer or region is the user's own pick of text; if it visits a
;; project file, the worker is asked first, and a file it denies is
;; refused; if it visits a file outside the project, the user confirms.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)
(require 'forj-worker)
(require 'forj-usage)
(require 'forj-session)

(declare-function dired-get-marked-files "dired")
(declare-function forj "forj-chat")
(declare-function forj-chat-send "forj-chat")
(declare-function forj-tools-session-id "forj-tools" ())


(defcustom forj-context-max-bytes (* 200 1024)
  "The most bytes one piece of context may hold; the rest is cut, visibly."
  :type 'natnum
  :group 'forj)

(defface forj-context-heading
  '((t :inherit font-lock-comment-face :weight bold))
  "Face for the heading of a chat's context list."
  :group 'forj)

(defvar-local forj-context-items nil
  "The context of this chat: a list of plists, oldest first.
Each has :title (what the model and the user see it as), :text, :bytes
and :truncated.")
(put 'forj-context-items 'permanent-local t)

;;; What is sent

(defconst forj-context--intro
  "The user attached the following context to this conversation (files and text from their editor, as they were when attached)."
  "The text of the message that carries the context.")

(defun forj-context-messages (messages)
  "MESSAGES with the chat's context first, as a user message of its own."
  (if forj-context-items
      (cons (list :role "user" :text forj-context--intro
                  :context (mapcar (lambda (item)
                                     (list :title (plist-get item :title) :text (plist-get item :text)))
                                   forj-context-items))
            messages)
    messages))

(defun forj-context-bytes ()
  "The bytes of this chat's context."
  (apply #'+ (mapcar (lambda (item) (plist-get item :bytes)) forj-context-items)))

;;; Adding and removing

(defun forj-context--chat (root)
  "The chat buffer of ROOT, opened if needed without changing windows."
  (or (cl-find-if (lambda (b)
                    (and (eq (buffer-local-value 'major-mode b) 'forj-chat-mode)
                         (equal (forj-session-root (buffer-local-value 'forj-session b)) root)))
                  (buffer-list))
      (save-current-buffer (save-window-excursion (forj root)))))

(defun forj-context--cut (text)
  "TEXT cut to `forj-context-max-bytes', and whether it was: (TEXT . CUT)."
  (if (<= (string-bytes text) forj-context-max-bytes)
      (cons text nil)
    (let ((end (min (length text) forj-context-max-bytes)))
      (while (> (string-bytes (substring text 0 end)) forj-context-max-bytes)
        (setq end (max 0 (- end (max 1 (/ (- (string-bytes (substring text 0 end))
                                              forj-context-max-bytes)
                                           2))))))
      (cons (substring text 0 end) t))))

(defun forj-context-add-text (chat title text &optional cut-before)
  "Add TEXT as context called TITLE to the CHAT buffer; return the item.
CUT-BEFORE non-nil says TEXT is already only part of its source."
  (with-current-buffer chat
    (pcase-let* ((`(,text . ,cut) (forj-context--cut text))
                 (item (list :title title
                             :text (if cut (concat text "\n[… cut by forj: the rest is not attached]") text)
                             :bytes (string-bytes text)
                             :truncated (or cut (and cut-before t)))))
      (setq forj-context-items
            (append (cl-remove title forj-context-items
                               :key (lambda (i) (plist-get i :title)) :test #'equal)
                    (list item)))
      ;; The counts of the last reply no longer describe what is sent.
      (setq forj-usage-basis nil)
      (forj-session-view 'context)
      (force-mode-line-update)
      (message "forj: added %s to the context (%s bytes, ≈%s tokens)%s"
               title (plist-get item :bytes)
               (forj-usage-format-tokens (forj-usage-tokens-of-bytes (plist-get item :bytes)))
               (cond (cut "; cut to `forj-context-max-bytes'")
                     ((plist-get item :truncated) "; cut: only its start is attached")
                     (t "")))
      item)))

(defun forj-context-remove (title)
  "Remove the context called TITLE from this chat."
  (interactive
   (progn
     (unless forj-context-items (user-error "This chat has no context to remove"))
     (list (completing-read "Remove from the context: "
                            (mapcar (lambda (i) (plist-get i :title)) forj-context-items) nil t))))
  (unless (cl-find title forj-context-items :key (lambda (i) (plist-get i :title)) :test #'equal)
    (user-error "No context called %s in this chat" title))
  (setq forj-context-items (cl-remove title forj-context-items
                                      :key (lambda (i) (plist-get i :title)) :test #'equal)
        forj-usage-basis nil)
  (forj-session-view 'context)
  (force-mode-line-update)
  (message "forj: %s is no longer in the context" title))

(defun forj-context-clear ()
  "Remove everything from this chat's context."
  (interactive)
  (setq forj-context-items nil forj-usage-basis nil)
  (forj-session-view 'context)
  (force-mode-line-update))

;;; Asking the worker

(defun forj-context--relative (file root)
  "FILE relative to ROOT if it is inside it (links resolved), else nil."
  (let ((true (file-truename file))
        (true-root (file-name-as-directory (file-truename root))))
    (and (file-in-directory-p true true-root)
         (not (equal (directory-file-name true) (directory-file-name true-root)))
         (file-relative-name true true-root))))

(defun forj-context--worker-read (root path check-only then &optional chat lines)
  "Have ROOT's worker read PATH (relative) with `read_file'; call THEN.
With CHECK-ONLY, the call is only planned: planning applies the
worker's path rules (inside the project, denied patterns) without
reading.  THEN gets (:ok t :content TEXT :truncated BOOL) or
\(:error MESSAGE).  The read is made in the session of the CHAT
buffer, if given: the worker keeps a record of what was read per
chat, and the file is read for that chat's model (it sees the text),
not for any other chat.  LINES, if given, reads only the first LINES
lines (a file too large to read whole)."
  (let ((fail (lambda (err)
                (funcall then (list :error (or (plist-get err :message) (format "%s" err)))))))
    (forj-worker-ensure
     root
     (lambda (worker)
       (let ((conn (forj-worker-connection worker))
             (id "forj-context"))
         (forj-epc-call
          conn "plan"
          (append
           (list :calls (vector (list :id id :name "read_file"
                                      :args (append
                                             (list :path path :max_bytes (max 1 forj-context-max-bytes))
                                             (and lines (list :start_line 1 :end_line lines)))))
                 :mode "enabled")
           (and chat (list :session (with-current-buffer chat (forj-tools-session-id))))
           ;; A check runs nothing: the journal keeps it as checked,
           ;; never as a batch left unfinished.
           (and check-only (list :check t)))
          :success
          (lambda (plan)
            (let ((item (aref (plist-get plan :items) 0)))
              (cond
               ((equal (plist-get item :disposition) "resolved")
                (forj-context--result (plist-get item :result) then))
               (check-only (funcall then (list :ok t)))
               (t
                ;; The user picked this file: that is the consent a reviewed
                ;; read would ask for.
                (forj-epc-call
                 conn "execute"
                 (list :batch_id (plist-get plan :batch_id)
                       :capacity_bytes (max 4096 (+ 4096 forj-context-max-bytes))
                       :approved (if (equal (plist-get item :disposition) "confirm") (vector id) [])
                       :denied (make-hash-table) :modified (make-hash-table))
                 :success (lambda (reply)
                            (forj-context--result (aref (plist-get reply :results) 0) then))
                 :error fail)))))
          :error fail)))
     fail)))

(defun forj-context--result (result then)
  "Call THEN with the outcome of a `read_file' RESULT of the worker."
  (let ((error (plist-get result :error))
        (value (plist-get result :result)))
    (cond
     (error (funcall then (list :error (plist-get error :message)
                                ;; Too large to read whole, or to scan that far.
                                :too-large (let ((details (plist-get error :details)))
                                             (and (or (plist-get details :limit)
                                                      (plist-get details :scan_limit))
                                                  t)))))
     ((not (eq (plist-get result :ok) t)) (funcall then (list :error "the worker did not read it")))
     ((equal (plist-get value :encoding) "base64")
      (funcall then (list :error "it is a binary file; only text can be attached")))
     (t (funcall then (list :ok t :content (or (plist-get value :content) "")
                            :truncated (eq (plist-get value :truncated) t)))))))

(defun forj-context-add-file (file &optional chat then)
  "Add the project FILE to the context of CHAT (default: its project's chat).
The worker reads it (see the Commentary).  THEN, if given, is called
with the new item, or nil if the file was refused."
  (let* ((root (if chat (forj-session-root (buffer-local-value 'forj-session chat)) (forj-worker-project-root
                                                                    (file-name-directory
                                                                     (expand-file-name file)))))
         (path (forj-context--relative (expand-file-name file) root))
         (chat (or chat (forj-context--chat root))))
    (unless path
      (user-error "%s is outside the project %s; forj attaches project files only, which its worker checks against its denied patterns.  To send it anyway, open it and add its buffer or a region"
                  (abbreviate-file-name file) (abbreviate-file-name root)))
    (forj-context--read-file root path chat forj-context--first-lines
                             (lambda (item) (when then (funcall then item))))))

(defconst forj-context--first-lines '(nil 10000 500 20)
  "How much of a file to read: whole, then only its first lines.
A file too large to read whole is read from its start, as many lines
as the worker will scan; the context keeps what fits and says it is cut.")

(defun forj-context--read-file (root path chat tries then)
  "Read PATH of ROOT for CHAT, whole or only its first lines.
Each of TRIES (nil: whole; N: the first N lines) is tried in turn, the
next one when the file is too large; THEN gets the item."
  (forj-context--worker-read
   root path nil
   (lambda (answer)
     (cond
      ((and (plist-get answer :too-large) (cdr tries))
       (forj-context--read-file root path chat (cdr tries) then))
      ((plist-get answer :error)
       (message "forj: %s was not added: %s" path (plist-get answer :error))
       (funcall then nil))
      (t
       (let ((cut (or (plist-get answer :truncated) (car tries))))
         (funcall then
                  (forj-context-add-text
                   chat path
                   (concat (plist-get answer :content)
                           (cond ((car tries)
                                  (format "\n[… cut by forj: the file is too large to attach whole; this is its start, at most %d lines]"
                                          (car tries)))
                                 (cut "\n[… cut by the worker's read limit]")
                                 (t "")))
                   cut))))))
   chat (car tries)))

(defun forj-context--check-buffer (buffer root then)
  "Check that the text of BUFFER may go to the model of ROOT's chat; then THEN.
A buffer visiting a project file is checked by the worker; one visiting
a file elsewhere needs the user's confirmation."
  (let* ((file (buffer-file-name buffer))
         (path (and file (forj-context--relative file root))))
    (cond
     ((null file) (funcall then))
     (path
      (forj-context--worker-read
       root path t
       (lambda (answer)
         (if (plist-get answer :error)
             (message "forj: not sent: the worker refuses %s: %s" path (plist-get answer :error))
           (funcall then)))))
     ((y-or-n-p (format "%s is outside the project; send its text to the model? "
                        (abbreviate-file-name file)))
      (funcall then))
     (t (message "forj: not sent")))))

(defun forj-context--buffer-title (buffer root &optional beg end)
  "How the text of BUFFER (between BEG and END, if given) is named for ROOT's chat."
  (let* ((file (buffer-file-name buffer))
         (name (if file
                   (or (forj-context--relative file root) (abbreviate-file-name file))
                 (buffer-name buffer))))
    (if beg
        (with-current-buffer buffer
          (format "%s:%d-%d" name (line-number-at-pos beg t)
                  (line-number-at-pos (max beg (1- end)) t)))
      name)))

(defun forj-context-add-buffer (buffer &optional beg end chat)
  "Add the text of BUFFER (the region BEG..END if given) to CHAT.
CHAT defaults to the chat of the buffer's project."
  (let* ((root (if chat
                   (forj-session-root (buffer-local-value 'forj-session chat))
                 (with-current-buffer buffer (forj-worker-project-root))))
         (title (forj-context--buffer-title buffer root beg end))
         (text (with-current-buffer buffer
                 (buffer-substring-no-properties (or beg (point-min)) (or end (point-max))))))
    (forj-context--check-buffer
     buffer root
     (lambda () (forj-context-add-text (or chat (forj-context--chat root)) title text)))))

;;;###autoload
(defun forj-add-context (&optional what)
  "Add WHAT to the context of the project's chat.
Interactively: the marked files in Dired, the region when it is
active, else a file or a buffer you choose.  WHAT is a file name, a
list of them, a buffer, or `region'."
  (interactive
   (list (cond
          ((derived-mode-p 'dired-mode) (dired-get-marked-files))
          ((use-region-p) 'region)
          (t (pcase (car (read-multiple-choice "Add to the context: "
                                               '((?f "file" "a file of the project")
                                                 (?b "buffer" "the text of a buffer"))))
               (?f (read-file-name "Add file: " nil nil t))
               (?b (get-buffer (read-buffer "Add buffer: " (other-buffer (current-buffer) t) t))))))))
  (let ((chat (and (derived-mode-p 'forj-chat-mode) (current-buffer))))
    (cond
     ((eq what 'region)
      (unless (use-region-p) (user-error "No active region"))
      (forj-context-add-buffer (current-buffer) (region-beginning) (region-end)))
     ((bufferp what) (forj-context-add-buffer what nil nil chat))
     ((stringp what)
      (if (file-directory-p what)
          (user-error "%s is a directory; mark its files in Dired and add them" what)
        (forj-context-add-file what chat)))
     ((consp what)
      (dolist (file what)
        (if (file-directory-p file)
            (message "forj: %s is a directory; skipped" file)
          (forj-context-add-file file chat))))
     (t (user-error "Nothing to add")))))

;;;###autoload
(defun forj-send-region (beg end question)
  "Ask QUESTION about the text between BEG and END, in the project's chat.
The question and the text, named by its file and lines, go as one
message."
  (interactive
   (progn
     (unless (use-region-p) (user-error "Select the text to ask about first"))
     (list (region-beginning) (region-end) (read-string "Ask about the region: "))))
  (when (string-blank-p question) (user-error "Type a question"))
  (let* ((buffer (current-buffer))
         (root (forj-worker-project-root))
         (title (forj-context--buffer-title buffer root beg end))
         (text (pcase-let ((`(,text . ,cut)
                            (forj-context--cut (buffer-substring-no-properties beg end))))
                 (if cut (concat text "\n[… cut by forj]") text)))
         (fence (if (string-match-p "^```" text) "~~~~" "```"))
         (language (replace-regexp-in-string "-\\(ts-\\)?mode\\'" "" (symbol-name major-mode))))
    (forj-context--check-buffer
     buffer root
     (lambda ()
       (let ((chat (forj-context--chat root)))
         (with-current-buffer chat
           (if (not (eq (forj-session-state forj-session) 'idle))
               (message "forj: not sent: the chat is busy; try again when the reply is done")
             (let ((draft (forj-session-draft)))
               (unless (string-blank-p draft)
                 (kill-new draft)
                 (message "forj: your draft in the chat is in the kill ring"))
               (forj-session-view 'set-draft
                                  (concat question "\n\n" title ":\n\n" fence language "\n" text
                                          (if (string-suffix-p "\n" text) "" "\n") fence "\n")))
             (forj-chat-send)))
         (display-buffer chat))))))

;;; @path completion

(defvar-local forj-context--files nil
  "This chat's project files for completion, and when they were listed.")

(defun forj-context--project-files (root)
  "The files of the project at ROOT, relative to it; listed at most every 30 s."
  (if (and forj-context--files (< (- (float-time) (car forj-context--files)) 30))
      (cdr forj-context--files)
    (let* ((project (project-current nil root))
           (files (mapcar (lambda (f) (file-relative-name f root))
                          ;; git cannot list a repository that is only an
                          ;; empty .git (project.el's root marker): walk it.
                          (or (and project (ignore-errors (project-files project)))
                              (directory-files-recursively
                               root "" nil (lambda (dir)
                                             (not (member (file-name-nondirectory dir)
                                                          '(".git" ".hg" ".svn" "node_modules")))))))))
      (setq forj-context--files (cons (float-time) files))
      files)))

(defun forj-context-complete-at-point ()
  "Complete \"@path\" in a chat's input with the project's files.
Choosing one adds the file to the chat's context."
  (let ((input (forj-session-view 'input)))
    (when (and (markerp input) (>= (point) input) (forj-session-current-root))
      (save-excursion
        (let ((end (point)))
          (when (re-search-backward "\\(?:^\\|[ \t\n(]\\)@\\([^ \t\n]*\\)\\=" (max input (line-beginning-position)) t)
            (let ((beg (match-beginning 1))
                  (chat (current-buffer))
                  (root (forj-session-root forj-session)))
              (list beg end
                    (completion-table-dynamic
                     (lambda (_) (forj-context--project-files root)))
                    :exclusive 'no
                    :exit-function
                    (lambda (path status)
                      (when (memq status '(finished sole exact))
                        (forj-context-add-file (expand-file-name path root) chat)))))))))))

(provide 'forj-context)
;;; forj-context.el ends here
